"""`kiq new NAME` as a new user meets it: the app it writes passes its own test as written,
and `kiq up --config NAME/kiq.toml`, run from another directory, serves its tables (learnt
from the catalog its pipeline writes) and its routes, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kiq.cli.new import FILES
from kiq.runtime.ports import free_ports
from tests.integration.test_up import kiq_up, ours, two_free_ports

pytestmark = pytest.mark.integration

TABLES = {"page-minutes", "visitor-hours", "country-days"}


def test_a_new_app_passes_its_test_and_kiq_up_serves_it(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "kiq", "new", "shop"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    app = tmp_path / "shop"
    assert sorted(p.name for p in app.iterdir()) == sorted(FILES)
    assert 'name = "shop"' in (app / "kiq.toml").read_text()
    again = subprocess.run(
        [sys.executable, "-m", "kiq", "new", "shop"], cwd=tmp_path, capture_output=True, text=True
    )
    assert again.returncode != 0 and "not empty" in again.stdout + again.stderr

    # Its test, as written, from the directory above it: no broker, no stream.
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "shop"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "3 passed" in tested.stdout, tested.stdout

    # kiq up from another directory: every path in the file is the file's own.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    broker_port, controller_port = free_ports(2)
    port = two_free_ports()
    env = {
        **os.environ,
        "KIQ_BROKER_PORT": str(broker_port),
        "KIQ_BROKER_CONTROLLER_PORT": str(controller_port),
        "KIQ_SERVE_SESSION_TIMEOUT_MS": "3000",
    }
    argv = [sys.executable, "-m", "kiq", "up", "--config", "../shop/kiq.toml"]
    with kiq_up([*argv, "--nodes", "2", "--port", str(port)], elsewhere, env, "shop"):
        front, second = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"

        listed = httpx.get(f"{front}/v1/tables").json()
        declared = {t["name"]: t["declared"] for t in listed["tables"]}
        assert set(declared) == TABLES, listed
        assert declared["visitor-hours"]["key"] == ["user"]
        assert declared["visitor-hours"]["window"] == "window"
        assert declared["visitor-hours"]["app"] == "shop"

        # A visitor's hours and a country's day, through the other node, by the app's routes.
        hour_key = first_key(second, "visitor-hours")
        user = hour_key.split("|")[0]
        hours = httpx.get(f"{second}/v1/visitors/{user}/hours").json()
        assert hour_key.split("|")[1] in [w["start"] for w in hours["windows"]], hours
        country, start, _ = first_key(front, "country-days").split("|")
        day = start[:10]
        got = httpx.get(f"{second}/v1/countries/{country}/days/{day}")
        assert got.status_code == 200 and got.json()["views"] >= 1, got.text
        # No [app] endpoints of the stock app: only the file's own routes and the core API.
        assert httpx.get(f"{front}/v1/stocks/AAPL").json()["error"] == "no_route"
    assert ours(tmp_path) == []


def first_key(url: str, table: str) -> str:
    """A key the table holds, once it holds one."""
    deadline = time.monotonic() + 60
    while True:
        page = httpx.get(f"{url}/v1/tables/{table}/range", params={"limit": 1}).json()
        if page.get("items"):
            return str(page["items"][0]["key"])
        assert time.monotonic() < deadline, page
        time.sleep(0.5)

"""Two applications run with `kiq up` from one directory never meet: each keeps its broker's
data under its own home, so the same input topic name may have another partition count in
each; while one runs, the other is told which broker holds the port instead of using it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.runtime.ports import free_ports
from tests.integration.test_up import ours, start_up

pytestmark = pytest.mark.integration

READY_S = 180.0


def app_file(directory: Path, name: str, partitions: int, broker_port: int) -> Path:
    """A small application: one node serving its input topic ``page-views`` as a table."""
    config = directory / f"{name}.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [broker]
            port = {broker_port}

            [app]
            name = "{name}"
            endpoints = []
            nodes = 1
            port = {free_ports(1)[0]}
            topics = {{ "page-views" = {partitions} }}

            [serve]
            cluster = "{name}"
            tables = ["views=page-views"]
            """
        )
    )
    return config


def kiq(*args: str) -> list[str]:
    return [sys.executable, "-m", "kiq", *args]


@contextlib.contextmanager
def up(config: Path, cwd: Path, env: dict[str, str]) -> Iterator[None]:
    """``kiq up`` until it says the application is up; Ctrl-C after, and a clean exit."""
    name = config.stem
    log = cwd / f"{name}.log"
    proc = start_up(kiq("up", "--config", str(config)), cwd, env, log)
    try:
        deadline = time.monotonic() + READY_S
        while f"{name} is up" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    text = log.read_text()
    assert code == 0 and f"{name} stopped" in text and "Traceback" not in text, text


def page_views(config: Path, cwd: Path, env: dict[str, str]) -> str:
    """``page-views``'s line in `kiq topics list` for the application of ``config``."""
    listed = subprocess.run(
        kiq("topics", "list", "--config", str(config)),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return next(line for line in listed.stdout.splitlines() if line.startswith("page-views "))


@pytest.mark.slow  # two brokers and two nodes, one after the other: 27-50 s
def test_two_apps_from_one_directory_keep_their_own_topics(tmp_path: Path):
    broker_port = free_ports(1)[0]  # the same broker port, as two apps left at the default
    alpha = app_file(tmp_path, "alpha", 6, broker_port)
    beta = app_file(tmp_path, "beta", 12, broker_port)
    env = {**os.environ, "COLUMNS": "400"}  # the error on one line
    for name in [n for n in env if n.startswith("KIQ_")]:
        del env[name]

    with up(alpha, tmp_path, env):
        assert page_views(alpha, tmp_path, env).split()[1] == "6"
        # beta while alpha runs: not alpha's broker, but a message saying whose it is.
        refused = subprocess.run(
            kiq("up", "--config", str(beta)),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1, said
        alpha_data = tmp_path / ".kiq" / "alpha" / "broker" / "data"
        assert f"127.0.0.1:{broker_port} is taken by another kiq broker" in said, said
        assert f"whose data is in {alpha_data}" in said and "[broker] port" in said, said
        assert "Traceback" not in said

    # One after the other on the same port: beta's broker is its own, so is its topic.
    with up(beta, tmp_path, env):
        assert page_views(beta, tmp_path, env).split()[1] == "12"
    for name in ("alpha", "beta"):
        assert (tmp_path / ".kiq" / name / "broker" / "data" / "server.properties").exists()
    assert not (tmp_path / ".kiq" / "broker").exists()
    time.sleep(0.5)
    assert ours(tmp_path) == []

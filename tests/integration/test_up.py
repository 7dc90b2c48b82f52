"""`kiq up` on a small application file: its own broker, a table served straight from an
input topic, two nodes with the file's endpoints, a feed; Ctrl-C leaves nothing behind."""

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

import httpx
import pytest

from kiq.runtime.ports import free_ports

pytestmark = pytest.mark.integration

COLORS = {"red": "#ff0000", "green": "#00ff00", "blue": "#0000ff", "navy": "#000080"}

ENDPOINTS = """
from kiq import Request, Routes, json_reply


def routes(app: Routes) -> None:
    app.get("/v1/colors/{name}", color)
    app.get("/v1/palette", palette)


async def color(request: Request):
    async def shout(value):
        return {**value, "loud": value["hex"].upper()}

    return request.lookup("colors", request.path_params["name"], enrich=shout)


async def palette(request: Request):
    many = await request.tables.get_many("colors", request.query["names"].split(","))
    page = await request.tables.range("colors", prefix="n")
    return json_reply({"found": many.fragments(), "missing": many.missing,
                       "n": [key for key, _ in page.items]})
"""

FEED = """
import json, os
from confluent_kafka import Producer

# murmur2, as Kafka's Java clients and kiq partition keys
config = {"bootstrap.servers": os.environ["KIQ_BOOTSTRAP"], "partitioner": "murmur2_random"}
producer = Producer(config)
for name, hex in %r.items():
    producer.produce("colors", key=name, value=json.dumps({"name": name, "hex": hex}))
producer.flush(30)
"""


def two_free_ports() -> int:
    """A port whose next one is free as well (the second node's)."""
    return free_ports(2, consecutive=True)[0]


def ours(root: Path) -> list[str]:
    """Processes whose command line names ``root``: what kiq up started and left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(root) in cmdline:
                found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def colors_app(tmp_path: Path, port: int) -> list[str]:
    """The colors application's files in ``tmp_path`` (two nodes from ``port``): its
    ``kiq up`` command line."""
    broker_port, controller_port = free_ports(2)
    (tmp_path / "colors_api.py").write_text(ENDPOINTS)
    (tmp_path / "feed.py").write_text(FEED % COLORS)
    config = tmp_path / "kiq.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [broker]
            port = {broker_port}
            controller_port = {controller_port}
            data_dir = "{tmp_path}/broker/data"
            log_dir = "{tmp_path}/broker/logs"

            [app]
            name = "colors"
            endpoints = ["colors_api.py:routes"]
            nodes = 2
            port = {port}
            home = "{tmp_path}/home"
            topics = {{ "colors" = 3 }}
            feeds = [["{sys.executable}", "{tmp_path}/feed.py"]]
            examples = ["curl -s {{url}}/v1/colors/red"]

            [serve]
            cluster = "colors"
            session_timeout_ms = 3000
            tables = ["colors=colors"]
            """
        )
    )
    return [sys.executable, "-m", "kiq", "up", "--config", str(config)]


def test_up_serves_the_files_table_and_endpoints_and_stops_cleanly(tmp_path: Path):
    port = two_free_ports()
    argv = colors_app(tmp_path, port)
    with kiq_up(argv, tmp_path, dict(os.environ), "colors"):
        front, second = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
        assert f"curl -s {front}/v1/colors/red" in (tmp_path / "up.log").read_text()

        # Every color from either node, as the table API answers, once the feed's are all in.
        for name, hex in COLORS.items():
            for url in (front, second):
                got = _eventually(lambda u=url, n=name: httpx.get(f"{u}/v1/tables/colors/keys/{n}"))
                assert got.json() == {"name": name, "hex": hex}
        red = httpx.get(f"{second}/v1/colors/red")
        assert red.status_code == 200, red.text
        assert red.json() == {"name": "red", "hex": "#ff0000", "loud": "#FF0000"}
        assert {"x-kiq-partition", "x-kiq-served-by", "x-kiq-offset"} <= set(red.headers)
        assert httpx.get(f"{front}/v1/colors/mauve").json()["error"] == "not_found"
        palette = httpx.get(f"{front}/v1/palette", params={"names": "red,blue,mauve"}).json()
        assert palette == {
            "found": {
                "red": {"name": "red", "hex": "#ff0000"},
                "blue": {"name": "blue", "hex": "#0000ff"},
            },
            "missing": ["mauve"],
            "n": ["navy"],
        }
        # The file's endpoints replace the shipped ones.
        assert httpx.get(f"{front}/v1/stocks/AAPL").json()["error"] == "no_route"
    time.sleep(0.5)
    assert ours(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=["hangup", "killed"])
def test_up_leaves_nothing_running_when_its_terminal_closes_or_it_is_killed(
    tmp_path: Path, sig: signal.Signals
):
    """The broker and the feed run in sessions of their own. A closed terminal (SIGHUP to
    the group) stops ``kiq up`` and its nodes as a Ctrl-C does; killed outright, its
    watchdog ends what it started."""
    argv = colors_app(tmp_path, two_free_ports())
    log = tmp_path / "up.log"
    up = start_up(argv, tmp_path, dict(os.environ), log)
    try:
        until_every_table_has_data(up, log)
        assert ours(tmp_path), "kiq up started nothing under its home"
        if sig is signal.SIGHUP:
            os.killpg(up.pid, sig)  # as a terminal's hangup reaches its foreground group
        else:
            up.send_signal(sig)  # kiq up alone
        code = up.wait(120)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
    text = log.read_text()
    if sig is signal.SIGHUP:
        assert code == 0 and "colors stopped" in text and "Traceback" not in text, text
        for node in ("n1", "n2"):  # the hangup reached them too: each stopped as on a SIGTERM
            node_log = (tmp_path / "home" / f"{node}.log").read_text()
            assert f"stopping node={node} (signal)" in node_log, node_log[-2000:]
    else:
        assert code == -signal.SIGKILL
    left = ours(tmp_path)
    deadline = time.monotonic() + 30  # the watchdog's grace is 10 s
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ours(tmp_path)
    assert left == [], left


def start_up(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``kiq up`` writing to ``log``, in a process group of its own: the test's signals."""
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def until_every_table_has_data(up: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 300
    while "every table has data" not in log.read_text():
        assert up.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)


@contextlib.contextmanager
def kiq_up(argv: list[str], cwd: Path, env: dict[str, str], name: str) -> Iterator[None]:
    """``kiq up`` running until every table has data; Ctrl-C after, and a clean exit."""
    log = cwd / "up.log"
    up = start_up(argv, cwd, env, log)
    try:
        until_every_table_has_data(up, log)
        yield
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
        try:
            code = up.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
    text = log.read_text()
    assert code == 0, text
    assert f"{name} stopped" in text and "Traceback" not in text, text


def _eventually(get, timeout_s: float = 60.0) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        resp = get()
        if resp.status_code == 200 or time.monotonic() > deadline:
            return resp
        time.sleep(0.3)

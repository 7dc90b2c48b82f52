"""A node's data directory runs out of space under writes, then gets it back.

The data directory is a small tmpfs (root only; skipped elsewhere). While it is
full, the table taking writes turns the node not-ready and keeps answering what
it holds; the other table answers as before. Once space returns, every record
is there, and still there after a restart: nothing lost, no store corrupted.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kiq.runtime import LocalNode
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.integration

DISK_MB = 24
BIG = 60_000  # bytes per value of the table that fills the disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(disk)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _get(node: LocalNode, table: str, key: str) -> httpx.Response:
    return httpx.get(f"{node.url}/v1/tables/{table}/keys/{key}", timeout=5)


def _ready(node: LocalNode) -> httpx.Response:
    return httpx.get(f"{node.url}/v1/health/ready", timeout=5)


def _wait(what: str, done, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.2)


def test_a_full_disk_loses_nothing_and_recovers(bootstrap, make_topic, small_disk, tmp_path):
    big, small = make_topic("big", partitions=1), make_topic("small", partitions=1)
    produce(bootstrap, small, [(f"s{i}", json.dumps({"i": i})) for i in range(50)])
    produce(bootstrap, big, [(f"b{i}", json.dumps({"v": 0, "pad": "x" * BIG})) for i in range(20)])
    node = LocalNode(
        node_id="n1",
        bootstrap=bootstrap,
        tables=[f"big={big}", f"small={small}"],
        data_dir=small_disk / "n1",
        log_file=tmp_path / "n1.log",
        extra_args=["--cluster", f"kiq-disk-{uuid.uuid4().hex[:6]}"],
        env={"KIQ_SERVE_VIEW_REFRESH_MS": "200"},
    )
    node.start()
    try:
        node.wait_ready(60)
        # Leave about 1 MiB free, then write far more than that.
        free = subprocess.run(["df", "-B1", "--output=avail", str(small_disk)], capture_output=True)
        avail = int(free.stdout.split()[-1])
        filler = small_disk / "filler"
        with filler.open("wb") as f:
            f.write(b"\0" * max(0, avail - 1_000_000))
        updates = [
            (f"b{i % 20}", json.dumps({"v": 1 + i // 20, "pad": "y" * BIG})) for i in range(400)
        ]
        produce(bootstrap, big, updates)
        latest = {k: json.loads(v)["v"] for k, v in updates}

        _wait("the node says a store refused a write", lambda: _ready(node).status_code == 503)
        assert "refused a write" in _ready(node).text
        assert node.running
        assert _get(node, "small", "s7").json() == {"i": 7}  # the rest is served as before
        assert _get(node, "big", "b3").status_code == 200  # what it holds, with its lag

        filler.unlink()
        _wait("ready again once space returns", lambda: _ready(node).status_code == 200)
        _wait(
            "every record applied",
            lambda: all(_get(node, "big", k).json()["v"] == v for k, v in latest.items()),
        )
        node.stop()
        node.start()
        node.wait_ready(60)
        assert all(_get(node, "big", k).json()["v"] == v for k, v in latest.items())
        assert _get(node, "small", "s49").json() == {"i": 49}
    finally:
        node.stop()
        print(node.tail(40))

"""`kiq serve --workers 2` against a real broker: a read worker answers beside its node.

One node, its port answered by two processes (the node and one read worker reading
the node's RocksDB stores as secondary instances). Every answer through fresh
connections (which the kernel spreads over both) is right; a write is read back at once
with min_offset through either; what the worker hands to its node (watches, status,
multiget) answers; a worker answers while its node is stopped (SIGSTOP), so the
worker's answers are its own; the node's /metrics counts both processes' answers; a
killed worker is started again; the node's end ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from kiq.kafka import producer_config
from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce
from tests.integration.test_serving import end_offsets

KEYS = [f"K{i:04d}" for i in range(600)]


def _worker_pids(node: LocalNode) -> list[int]:
    """The node's read workers: its children running ``kiq.workers``."""
    assert node.proc is not None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == node.proc.pid and b"kiq.workers" in cmdline and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _until(condition, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _serving_workers(node: LocalNode) -> int:
    return node.log_file.read_text(errors="replace").count("read worker serving")


def _gets_counted(node: LocalNode) -> float:
    text = _get(node.url, "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('kiq_requests_total{route="get",status="200"}')
    )


def _get(url: str, path: str, timeout_s: float = 5.0) -> httpx.Response:
    """One request on a connection of its own: the kernel picks the process."""
    with httpx.Client(timeout=timeout_s) as client:
        return client.get(f"{url}{path}")


@pytest.fixture
def node(bootstrap: str, make_topic, tmp_path: Path):
    topic = make_topic("worked", partitions=6)
    produce(bootstrap, topic, [(k, json.dumps({"k": k, "v": 1})) for k in KEYS])
    made = LocalNode(
        "w1",
        bootstrap,
        [f"worked={topic}"],
        tmp_path / "w1",
        tmp_path / "w1.log",
        extra_args=["--cluster", f"kiq-workers-{os.getpid()}-{time.monotonic_ns()}"],
        workers=2,
    )
    made.start()
    try:
        made.wait_ready(90)
        _until(lambda: _serving_workers(made) >= 1, what="the read worker to serve")
        last = end_offsets(bootstrap, topic, 6)
        from kiq.bench.cluster import wait_applied

        wait_applied([made], "worked", last, timeout_s=60)
        yield made, topic
    finally:
        made.stop()


def test_two_processes_answer_one_port(node, bootstrap):
    n, topic = node
    (worker,) = _worker_pids(n)

    # Every key right, each through a fresh connection.
    for key in KEYS[::5]:
        resp = _get(n.url, f"/v1/tables/worked/keys/{key}")
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"k": key, "v": 1}
        assert resp.headers["x-kiq-served-by"] == "w1"

    # Each process answers its own liveness: connections reach both.
    reached = {_get(n.url, "/v1/health/live").json().get("worker", 0) for _ in range(40)}
    assert reached == {0, 1}, reached

    # The node's /metrics counts what both processes answered.
    _until(lambda: _gets_counted(n) >= len(KEYS[::5]), timeout_s=10, what="the worker's counts")

    # A write is read back at once with min_offset, whichever process a connection reaches.
    producer = Producer(producer_config(bootstrap))
    offsets: dict[str, int] = {}

    def delivered(err, msg) -> None:
        assert err is None
        offsets[msg.key().decode()] = msg.offset()

    for key in KEYS[:20]:
        producer.produce(
            topic, key=key.encode(), value=json.dumps({"k": key, "v": 2}), on_delivery=delivered
        )
    producer.flush(10)
    for key in KEYS[:20]:
        resp = _get(n.url, f"/v1/tables/worked/keys/{key}?min_offset={offsets[key]}&wait_ms=5000")
        assert resp.status_code == 200, resp.text
        assert resp.json()["v"] == 2, (key, resp.headers)

    # What a worker hands to its node answers too.
    for _ in range(6):
        assert _get(n.url, "/v1/status").status_code == 200
        got = httpx.post(f"{n.url}/v1/tables/worked/multiget", json={"keys": KEYS[:30]}, timeout=10)
        assert got.status_code == 200, got.text
        assert len(got.json()["found"]) == 30
    watch = f"{n.url}/v1/tables/worked/keys/{KEYS[0]}/watch"
    with httpx.Client(timeout=10) as client, client.stream("GET", watch) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["snapshot"] is True
                break

    # The node stopped (SIGSTOP): the connections the worker holds still answer.
    assert n.proc is not None
    answered = asyncio.run(_answered_while_stopped(n, KEYS[100:140]))
    assert answered >= 5, f"the worker answered {answered} of 40 connections"

    # A worker killed is started again, and answers.
    os.kill(worker, signal.SIGKILL)
    _until(lambda: _serving_workers(n) >= 2, what="the worker to be started again")
    (again,) = _worker_pids(n)
    assert again != worker
    for key in KEYS[200:260]:
        resp = _get(n.url, f"/v1/tables/worked/keys/{key}")
        assert resp.status_code == 200 and resp.json() == {"k": key, "v": 1}

    # The node's end ends its worker.
    n.stop()
    _until(lambda: _gone(again), timeout_s=15, what="the worker to end")


async def _answered_while_stopped(n: LocalNode, keys: list[str]) -> int:
    """Opens a connection per key, then stops the node and asks each at once: those the
    worker holds answer (within its STALE_S), those the node holds time out."""
    assert n.proc is not None
    clients = [httpx.AsyncClient(base_url=n.url, timeout=0.5) for _ in keys]
    try:
        for client, key in zip(clients, keys, strict=True):
            assert (await client.get(f"/v1/tables/worked/keys/{key}")).status_code == 200

        async def ask(client: httpx.AsyncClient, key: str) -> bool:
            try:
                resp = await client.get(f"/v1/tables/worked/keys/{key}")
            except httpx.HTTPError:
                return False  # a connection the stopped node holds
            assert resp.status_code == 200 and resp.json() == {"k": key, "v": 1}
            return True

        os.kill(n.proc.pid, signal.SIGSTOP)
        try:
            got = await asyncio.gather(*(ask(c, k) for c, k in zip(clients, keys, strict=True)))
        finally:
            os.kill(n.proc.pid, signal.SIGCONT)
        return sum(got)
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


def test_a_worker_ends_with_a_killed_node(node):
    n, _ = node
    (worker,) = _worker_pids(n)
    n.kill()
    _until(lambda: _gone(worker), timeout_s=15, what="the worker to end after its node")


# -- the fences around a node's own processes (issue 37) ----------------------------------

RATE, BURST = 0.05, 5  # one token back every 20 s: a run of a few seconds earns at most one


@pytest.fixture
def limited(bootstrap: str, make_topic, tmp_path: Path):
    """A node of three processes whose callers may send a burst of 5, then one per 20 s."""
    topic = make_topic("limited", partitions=3)
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS[:30]])
    made = LocalNode(
        "w3",
        bootstrap,
        [f"limited={topic}"],
        tmp_path / "w3",
        tmp_path / "w3.log",
        extra_args=[
            *("--cluster", f"kiq-limited-{os.getpid()}-{time.monotonic_ns()}"),
            *("--rate-limit", str(RATE), "--rate-burst", str(BURST)),
        ],
        workers=3,
    )
    made.start()
    try:
        made.wait_ready(90)
        _until(lambda: _serving_workers(made) >= 2, what="both read workers to serve")
        yield made
    finally:
        made.stop()


def test_a_callers_burst_is_counted_once_for_all_the_nodes_processes(limited):
    """60 lookups, each on a connection of its own (the kernel spreads them over the three
    processes): at most the burst, plus what the bucket earns back meanwhile, pass. Each
    process counting alone let 3 x 5 through."""
    reached = {_get(limited.url, "/v1/health/live").json().get("worker", 0) for _ in range(30)}
    assert reached == {0, 1, 2}, reached  # every process takes connections
    started = time.monotonic()
    statuses = [
        _get(limited.url, f"/v1/tables/limited/keys/{KEYS[i % 30]}").status_code for i in range(60)
    ]
    earned = (time.monotonic() - started) * RATE
    assert set(statuses) <= {200, 429}, statuses
    passed = statuses.count(200)
    assert BURST <= passed <= BURST + earned, (passed, earned)


def _listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on: its sockets' inodes, found in /proc/net/tcp*."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_nodes_own_listener_is_a_socket_only_its_user_reaches(limited):
    """The workers reach their node over a Unix socket (0600, in a 0700 directory of its
    own), and the node listens on no TCP port but its public one."""
    assert limited.proc is not None
    assert _listening_tcp_ports(limited.proc.pid) == {limited.port}
    worker = _worker_pids(limited)[0]
    environ = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{worker}/environ").read_text().split("\0")
        if "=" in entry
    )
    home = environ["KIQ_WORKER_HOME"]
    assert home.startswith("unix:"), home
    socket_path = Path(home[len("unix:") :])
    assert socket_path.is_socket()
    assert socket_path.stat().st_mode & 0o777 == 0o600
    assert socket_path.parent.stat().st_mode & 0o777 == 0o700
    assert Path(environ["KIQ_WORKER_LIMITS"]).parent == socket_path.parent
    limited.stop()
    _until(lambda: not socket_path.parent.exists(), timeout_s=15, what="the node to remove it")

"""Chaos scenarios about the data rather than the processes, under a steady reader load.

``disk-full``: one node serves a table of small values and one of 60 kB values from
a data directory on a 24 MiB tmpfs (root only). The disk is filled to its last
MiB and the big table takes 400 updates: its store refuses writes, the node turns
not-ready and keeps answering both tables from what it holds; the filler is
removed, the node catches up, is restarted, and every update must be there.

``large-values``: two nodes serve 16 values of 1 MiB (half of the reads are
forwarded); every value is rewritten during the load, and each must be served
intact, new, through both nodes, by lookup, multiget and range.

``topic-recreated``: two nodes serve a table whose topic is deleted and made
again with fewer records: the nodes must serve the new log, and none of the old
one. Reads go to keys present in both logs.

Each reports the standard figures of ``kiq bench chaos``: reads sent and failed,
the worst read, records lost and the recovery time.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kiq.bench.progress import Reporter, reporter
from kiq.bench.reader import ReaderLoad, watch_reads
from kiq.bench.stack import Stack, local_stack
from kiq.errors import ConfigError, KiqError
from kiq.kafka import create_topics, delete_topics
from kiq.kafka.records import JsonProducer
from kiq.runtime.nodes import LocalNode

DATA_SCENARIOS = ("disk-full", "large-values", "topic-recreated")

_MIB = 1024 * 1024
_DISK_MB = 24
_BIG_VALUE = 60_000


@dataclass(frozen=True)
class DataChaosConfig:
    scenario: str
    rate: int = 200  # reader GETs per second (large-values: a tenth of it, 1 MiB each)
    within_s: float = 90.0  # give up waiting for a recovery after this


def run_data_chaos(cfg: DataChaosConfig, progress: Reporter | None = None) -> dict[str, object]:
    runs: dict[str, Callable[[Stack, DataChaosConfig, Reporter], dict[str, object]]] = {
        "disk-full": _disk_full,
        "large-values": _large_values,
        "topic-recreated": _topic_recreated,
    }
    if cfg.scenario not in runs:
        raise ConfigError(f"{cfg.scenario!r}: choose one of {', '.join(DATA_SCENARIOS)}")
    if cfg.rate < 10:
        raise ConfigError("--rate must be at least 10 reads a second")
    with reporter(progress, cfg.scenario) as show, local_stack(progress=show) as stack:
        return {"scenario": cfg.scenario, **runs[cfg.scenario](stack, cfg, show)}


def _disk_full(stack: Stack, cfg: DataChaosConfig, show: Reporter) -> dict[str, object]:
    disk = stack.home / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={_DISK_MB}m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        raise ConfigError(
            f"disk-full mounts a {_DISK_MB} MiB tmpfs, which needs root: {mounted.stderr.strip()}"
        )
    node = _node(stack, "n1", ["big=chaos-big", "small=chaos-small"], disk / "n1")
    try:
        return _fill_the_disk(stack, cfg, node, disk, show)
    finally:
        node.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill_the_disk(
    stack: Stack, cfg: DataChaosConfig, node: LocalNode, disk: Path, show: Reporter
) -> dict[str, object]:
    show.phase("loading the tables")
    create_topics(stack.bootstrap, {"chaos-big": 1, "chaos-small": 1})
    small = [{"k": f"s{i}", "i": i} for i in range(50)]
    _produce(stack.bootstrap, "chaos-small", small)
    pad = "x" * _BIG_VALUE
    _produce(
        stack.bootstrap,
        "chaos-big",
        [{"k": f"b{i}", "v": 0, "pad": pad} for i in range(20)],
    )
    show.phase("starting the node")
    node.start()
    node.wait_ready(cfg.within_s)
    urls = lambda: [node.url]  # noqa: E731
    big_keys = [f"b{i}" for i in range(20)]
    with (
        ReaderLoad(
            urls, "small", [f"s{i}" for i in range(50)], cfg.rate // 2, max_s=600
        ) as small_load,
        ReaderLoad(urls, "big", big_keys, cfg.rate // 2, max_s=600) as big_load,
    ):
        watch_reads(show, small_load, big_load)
        show.phase("reading", 2)
        time.sleep(2)
        show.phase("disk full: 400 updates, until the node is not ready")
        free = subprocess.run(["df", "-B1", "--output=avail", str(disk)], capture_output=True)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * max(0, int(free.stdout.split()[-1]) - _MIB))
        pad = "y" * _BIG_VALUE
        updates = [{"k": f"b{i % 20}", "v": 1 + i // 20, "pad": pad} for i in range(400)]
        filled_at = time.monotonic()
        _produce(stack.bootstrap, "chaos-big", updates)
        latest = {str(u["k"]): int(str(u["v"])) for u in updates}
        refused = _until(lambda: _ready(node) == 503, cfg.within_s)
        not_ready_after_s = round(time.monotonic() - filled_at, 1) if refused else None
        show.phase("reading against the full disk", 2)
        time.sleep(2)  # reads go on against the full disk
        show.phase("disk freed: catching up")
        filler.unlink()
        freed_at = time.monotonic()
        caught_up = _until(
            lambda: _ready(node) == 200 and not _stale(node, "big", latest), cfg.within_s
        )
        recovery_s = round(time.monotonic() - freed_at, 1) if caught_up else None
    stats = small_load.stats.merged(big_load.stats)
    show.phase("restarting the node")
    node.stop()
    node.start()
    node.wait_ready(cfg.within_s)
    lost = _stale(node, "big", latest)
    return {
        **stats.summary(),
        "records_lost": len(lost),
        "lost_sample": lost[:5],
        "not_ready_after_s": not_ready_after_s,
        "recovery_s": recovery_s,
        "restarted_and_intact": not lost and _value(node, "small", "s49") == {"k": "s49", "i": 49},
        "node_died": not node.running,
    }


def _large_values(stack: Stack, cfg: DataChaosConfig, show: Reporter) -> dict[str, object]:
    topic = "chaos-large"
    keys = [f"doc-{i:02d}" for i in range(16)]
    show.phase("loading 16 values of 1 MiB")
    create_topics(stack.bootstrap, {topic: 4}, config={"max.message.bytes": str(4 * _MIB)})
    _produce(
        stack.bootstrap, topic, [_document(k, 1) for k in keys], **{"message.max.bytes": 4 * _MIB}
    )
    nodes = [_node(stack, f"n{i}", [f"docs={topic}"], stack.home / f"n{i}") for i in (1, 2)]
    show.phase("starting 2 nodes")
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready(cfg.within_s)
    urls = lambda: [n.url for n in nodes]  # noqa: E731
    with ReaderLoad(urls, "docs", keys, max(1, cfg.rate // 10), max_s=600, concurrency=8) as load:
        watch_reads(show, load)
        show.phase("reading the first values")
        _until(lambda: all(_version(n, k) == 1 for n in nodes for k in keys), cfg.within_s)
        time.sleep(3)  # reads of the first values
        show.phase("every value rewritten: until both nodes serve the new ones")
        written_at = time.monotonic()
        _produce(
            stack.bootstrap,
            topic,
            [_document(k, 2) for k in keys],
            **{"message.max.bytes": 4 * _MIB},
        )
        _until(lambda: all(_version(n, k) == 2 for n in nodes for k in keys), cfg.within_s)
        recovery_s = round(time.monotonic() - written_at, 1)
        show.phase("reading the new values", 2)
        time.sleep(2)
    show.phase("checking every value, multiget and range")
    lost = sorted(
        {k for n in nodes for k in keys if _raw(n, "docs", k) != orjson.dumps(_document(k, 2))}
    )
    return {
        **load.stats.summary(),
        "value_bytes": len(orjson.dumps(_document(keys[0], 2))),
        "records_lost": len(lost),
        "lost_sample": lost[:5],
        "recovery_s": recovery_s,
        "multiget_and_range_intact": _batches_intact(nodes, keys),
        "nodes_died": [n.node_id for n in nodes if not n.running],
    }


def _topic_recreated(stack: Stack, cfg: DataChaosConfig, show: Reporter) -> dict[str, object]:
    topic = f"chaos-recreated-{uuid.uuid4().hex[:6]}"
    show.phase("loading the table")
    create_topics(stack.bootstrap, {topic: 3})
    _produce(stack.bootstrap, topic, [{"k": f"k{i}", "v": 1} for i in range(60)])
    nodes = [_node(stack, f"n{i}", [f"t={topic}"], stack.home / f"n{i}") for i in (1, 2)]
    show.phase("starting 2 nodes")
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready(cfg.within_s)
    both = [f"k{i}" for i in range(10)]  # in the old log and the new one
    _until(lambda: all(_got(n, "k59") == 1 for n in nodes), cfg.within_s)
    urls = lambda: [n.url for n in nodes if n.running]  # noqa: E731
    with ReaderLoad(urls, "t", both, cfg.rate, max_s=600) as load:
        watch_reads(show, load)
        show.phase("reading", 2)
        time.sleep(2)
        show.phase("topic deleted and made again: until the nodes serve the new log")
        delete_topics(stack.bootstrap, [topic])
        create_topics(stack.bootstrap, {topic: 3})
        _produce(stack.bootstrap, topic, [{"k": k, "v": 2} for k in both])
        made_at = time.monotonic()

        def serves_new_log(node: LocalNode) -> bool:
            new = all(_got(node, k) == 2 for k in both)
            return new and all(_got(node, f"k{i}") == 404 for i in range(10, 60))

        replaced = _until(lambda: all(serves_new_log(n) for n in nodes), cfg.within_s)
        recovery_s = round(time.monotonic() - made_at, 1) if replaced else None
        show.phase("reading the new log", 2)
        time.sleep(2)
    show.phase("checking the old records are gone")
    lost = sorted({k for n in nodes for k in both if _got(n, k) != 2})
    old = sorted({f"k{i}" for n in nodes for i in range(10, 60) if _got(n, f"k{i}") != 404})
    return {
        **load.stats.summary(),
        "records_lost": len(lost),
        "lost_sample": lost[:5],
        "old_records_still_served": len(old),
        "recovery_s": recovery_s,
        "nodes_died": [n.node_id for n in nodes if not n.running],
    }


def _node(stack: Stack, node_id: str, tables: list[str], data_dir: Path) -> LocalNode:
    """A node of the stack's cluster (not started), stopped with the stack."""
    return stack.node(
        node_id,
        tables,
        data_dir,
        extra_args=["--cluster", "kiq-chaos"],
        env={"KIQ_SERVE_VIEW_REFRESH_MS": "200", "KIQ_SERVE_SESSION_TIMEOUT_MS": "3000"},
    )


def _produce(
    bootstrap: str, topic: str, records: Sequence[dict[str, object]], **extra: Any
) -> None:
    """JSON records keyed by their ``k``."""
    producer = JsonProducer(bootstrap, topic, key_field="k", linger_ms=0, **extra)
    for record in records:
        producer.produce(record)
    if producer.flush(60) or producer.failed:
        raise KiqError(f"the broker did not take the writes to {topic}: {producer.last_error}")


def _document(key: str, version: int) -> dict[str, object]:
    """About 1 MiB of JSON whose content depends on the key and the version."""
    seed = hashlib.sha256(f"{key}/{version}".encode()).hexdigest()
    return {"k": key, "version": version, "blob": seed * (_MIB // 64)}


def _batches_intact(nodes: list[LocalNode], keys: list[str]) -> bool:
    body = orjson.dumps({"keys": keys[:6]})
    request = urllib.request.Request(
        f"{nodes[0].url}/v1/tables/docs/multiget",
        data=body,
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            found = orjson.loads(r.read())["found"]
        with urllib.request.urlopen(
            f"{nodes[-1].url}/v1/tables/docs/range?limit=3", timeout=30
        ) as r:
            items = orjson.loads(r.read())["items"]
    except (OSError, ValueError, KeyError):
        return False
    return (
        sorted(found) == keys[:6]
        and [i["key"] for i in items] == keys[:3]
        and all(found[k] == _document(k, 2) for k in keys[:6])
    )


def _raw(node: LocalNode, table: str, key: str) -> bytes | int:
    """The body served for ``key``, or the status (-1: no answer)."""
    try:
        with urllib.request.urlopen(f"{node.url}/v1/tables/{table}/keys/{key}", timeout=30) as r:
            body: bytes = r.read()
            return body
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def _value(node: LocalNode, table: str, key: str) -> object:
    raw = _raw(node, table, key)
    return orjson.loads(raw) if isinstance(raw, bytes) else raw


def _got(node: LocalNode, key: str) -> object:
    """Table ``t``'s ``v`` for ``key``, else the status."""
    found = _value(node, "t", key)
    return found.get("v") if isinstance(found, dict) else found


def _version(node: LocalNode, key: str) -> object:
    found = _value(node, "docs", key)
    return found.get("version") if isinstance(found, dict) else found


def _stale(node: LocalNode, table: str, latest: dict[str, int]) -> list[str]:
    """The keys whose served ``v`` is not the latest written."""
    stale = []
    for key, v in latest.items():
        found = _value(node, table, key)
        if not isinstance(found, dict) or found.get("v") != v:
            stale.append(key)
    return stale


def _ready(node: LocalNode) -> int:
    try:
        with urllib.request.urlopen(f"{node.url}/v1/health/ready", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def _until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True

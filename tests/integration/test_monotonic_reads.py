"""Monotonic reads with a position token, against a real broker and three nodes.

A writer keeps updating a few keys of one partition of a table. A reader asks each key
in turn of the partition's active node, of its standby (``max_lag``: that node's own
standby replica answers, no hop) and of the third node (it forwards), and remembers
the largest offset it saw of each key. With its position token (sent back as
``X-Kiq-After``, merged from every answer's ``X-Kiq-Position``) no read shows a key
older than one already seen, across 10,000 reads and a kill -9 of the active node.
Without the token the same loop does see a key go back: the standby applies the
topic on its own, a little behind or ahead of the active, so the nodes take turns at
being older.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from confluent_kafka import Producer

from kiq.client.position import SessionPosition
from kiq.kafka import producer_config
from kiq.partitioning import partition_for
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.test_forwarding import settle
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

pytestmark = [pytest.mark.integration, pytest.mark.slow]

make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes
PARTITIONS = 3  # one active partition per node: the cluster settles balanced
KEYS = [k for k in (f"k{i}" for i in range(100)) if partition_for(k, PARTITIONS) == 0][:6]
READS = 10_000
UNTOKENED_READS = 10_000  # the loop without the token stops at its first decrease
ANY_STANDBY = {"max_lag": "1000000", "wait_ms": "3000"}


class Writer(threading.Thread):
    """Updates every key in turn, about ``rate`` records a second, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 1500) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({**producer_config(bootstrap), "linger.ms": 1})
        self.topic = topic
        self.pause_s = 1 / rate
        self.stopping = threading.Event()
        self.written = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            key = KEYS[self.written % len(KEYS)]
            self.producer.produce(self.topic, key=key.encode(), value=b'{"n": %d}' % self.written)
            self.written += 1
            self.producer.poll(0)
            time.sleep(self.pause_s)
        self.producer.flush(10)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


@dataclass
class Tally:
    reads: int = 0
    refused: int = 0  # 503s and connections refused (the killed node, a failover)
    decreases: list[tuple[str, int, int, str]] = field(default_factory=list)
    served_by: dict[str, int] = field(default_factory=dict)


def read_loop(
    urls: dict[str, str],
    reads: int,
    position: SessionPosition | None,
    kill: tuple[int, threading.Event] | None = None,
    stop_at_first_decrease: bool = False,
    deadline_s: float = 90,
) -> Tally:
    """``reads`` answered lookups, each key asked of every node in turn (``urls``: node id
    → URL, in that order); ``kill``: after that many reads the event is set, and the loop
    goes on with the nodes that answer."""
    tally = Tally()
    best: dict[str, int] = {}
    live = dict(urls)
    clients = {n: httpx.Client(base_url=u, timeout=10) for n, u in urls.items()}
    deadline = time.monotonic() + deadline_s
    i = 0
    try:
        while tally.reads < reads and time.monotonic() < deadline:
            if kill is not None and tally.reads >= kill[0] and not kill[1].is_set():
                kill[1].set()
            names = list(live)
            node = names[i % len(names)]
            key = KEYS[(i // len(names)) % len(KEYS)]  # each key of every node in a row
            i += 1
            headers = position.asking(None) if position is not None else None
            try:
                r = clients[node].get(
                    f"/v1/tables/m/keys/{key}", params=ANY_STANDBY, headers=headers
                )
            except httpx.TransportError:
                tally.refused += 1
                live.pop(node, None)  # the killed node
                continue
            if position is not None:
                position.seen({k.lower(): v for k, v in r.headers.items()})
            if r.status_code != 200:
                tally.refused += 1
                continue
            tally.reads += 1
            offset = int(r.headers["x-kiq-offset"])
            by = r.headers["x-kiq-served-by"]
            tally.served_by[by] = tally.served_by.get(by, 0) + 1
            if offset < best.get(key, -1):
                tally.decreases.append((key, best[key], offset, f"{node} served by {by}"))
                if stop_at_first_decrease:
                    break
            best[key] = max(best.get(key, -1), offset)
    finally:
        for c in clients.values():
            c.close()
    return tally


def test_a_token_keeps_reads_from_going_back_through_a_failover(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("mono", partitions=PARTITIONS)
    produce(bootstrap, topic, [(k, '{"n": -1}') for k in KEYS])
    cluster: Cluster = make_cluster([f"m={topic}"])
    wait_applied(cluster, "m", end_offsets(bootstrap, topic, PARTITIONS))
    active, standby = settle(cluster, "m")[0][:2]
    third = next(n for n in cluster.nodes if n not in (active, standby))
    order = {n: cluster.nodes[n].url for n in (active, standby, third)}
    writer = Writer(bootstrap, topic)
    writer.start()
    try:
        # Without the token: the nodes take turns at being behind, and a key goes back.
        plain = read_loop(order, UNTOKENED_READS, None, stop_at_first_decrease=True)
        assert plain.decreases, (
            f"{plain.reads} reads without a token never saw a key go back: the test could "
            f"not fail (served by {plain.served_by})"
        )
        # With it: never, through a kill -9 of the active node a third of the way in.
        kill_now = threading.Event()
        killer = threading.Thread(
            target=lambda: kill_now.wait(120) and cluster.nodes[active].kill(), daemon=True
        )
        killer.start()
        position = SessionPosition()
        tokened = read_loop(order, READS, position, kill=(READS // 3, kill_now))
        killer.join(30)
    finally:
        writer.stop()
    assert tokened.reads == READS, f"only {tokened.reads} answered ({tokened.refused} refused)"
    assert tokened.decreases == [], tokened.decreases[:5]
    assert not cluster.nodes[active].running
    assert tokened.served_by.get(standby, 0) > 0  # the standby answered, then took over
    assert position.token.startswith("m:0=")

"""Lookups waiting for ``min_offset``: woken when it lands, capped, never left behind.

One node in process, one partition; records land as the materializer applies them
when Kafka brings them (``land``), from another thread.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiq.kafka.reader import Fetched, Record
from kiq.peers.wire import Lookup, Outcome, decode_results, encode
from kiq.replicas import Replica, ReplicaState
from kiq.replicas.waits import Parking
from kiq.security import VerifiedCaller
from kiq.security.scopes import Grants
from kiq.settings import LimitsSettings
from tests.unit.replicas.test_materializer import StandInRecord
from tests.unit.stand_ins import Cluster, LocalNode, Response, call, serving, start_node, wait_until

UNAVAILABLE = "min_offset not reached within wait_ms"


def node_with(tmp_path: Path, limits: LimitsSettings) -> LocalNode:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    node = start_node(tmp_path, cluster, {"t=t,store=memory": 1}, limits=limits)
    wait_until(serving(node.node, ReplicaState.ACTIVE), what="an active replica")
    return node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    made = node_with(tmp_path, LimitsSettings())
    yield made
    made.node.stop()


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[LocalNode]:
    made = node_with(tmp_path, LimitsSettings(max_parked_waits=3, max_parked_waits_per_caller=2))
    yield made
    made.node.stop()


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``asyncio.sleep`` kiq's own code calls meanwhile: polling would show here."""
    calls: list[str] = []
    sleep = asyncio.sleep

    def counted(delay: float, *args: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("kiq."):
            calls.append(caller)
        return sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", counted)
    return calls


def replica_of(node: LocalNode) -> Replica:
    replica = node.node.replica("t", 0)
    assert replica is not None
    return replica


def land(node: LocalNode, key: str, value: bytes, offset: int) -> None:
    """``key`` = ``value`` at ``offset``, applied as the materializer applies what Kafka brings."""
    m = node.materializer
    m._reader.assigned[("t", 0)] = offset + 1  # type: ignore[attr-defined]  # the log's end
    batch: list[Record] = [StandInRecord(key.encode(), value, offset)]
    m._apply(Fetched({("t", 0): batch}))


def lookup(node: LocalNode, key: str, query: str = "", client: str = "127.0.0.1") -> Any:
    async def from_client(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await node.app({**scope, "client": (client, 50000)}, receive, send)

    target = f"/v1/tables/t/keys/{key}" + (f"?{query}" if query else "")
    return call(from_client, "GET", target)


def parking(node: LocalNode) -> Parking:
    return node.app.lookups.reader.here.parking


def no_waits_left(node: LocalNode) -> bool:
    waits = replica_of(node).waits
    return parking(node).parked == 0 and len(waits) == 0 and waits._heap == []


def test_a_parked_lookup_is_answered_once_its_offset_lands_not_polled(node, no_polling):
    async def scenario() -> tuple[Response, float, bool]:
        parked = asyncio.create_task(lookup(node, "k", "min_offset=2&wait_ms=5000"))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(land, node, "k", b'{"n":1}', 1)  # not there yet
        await asyncio.sleep(0.1)
        early = parked.done()
        landed = time.monotonic()
        await asyncio.to_thread(land, node, "k", b'{"n":2}', 2)
        answer = await asyncio.wait_for(parked, 2.0)
        return answer, time.monotonic() - landed, early

    answer, took, early = asyncio.run(scenario())
    assert no_polling == []  # parked 200 ms without one wake-up of its own
    assert not early
    assert (answer.status, answer.json(), answer.headers["x-kiq-offset"]) == (200, {"n": 2}, "2")
    assert took < 0.5
    assert no_waits_left(node)


def test_a_wait_past_wait_ms_is_the_usual_503(node, no_polling):
    async def scenario() -> tuple[Response, float]:
        started = time.monotonic()
        answer = await lookup(node, "k", "min_offset=100&wait_ms=150")
        return answer, time.monotonic() - started

    answer, took = asyncio.run(scenario())
    assert answer.status == 503, answer.body
    body = answer.json()
    assert (body["error"], body["reason"]) == ("unavailable", UNAVAILABLE)
    assert body["applied_offset"] == -1
    assert 0.14 <= took < 1.0
    assert no_polling == []
    assert no_waits_left(node)


def test_parked_lookups_over_a_cap_are_429_with_retry_after(capped):
    def park(client: str) -> Any:
        return asyncio.create_task(lookup(capped, "k", "min_offset=0&wait_ms=5000", client))

    async def refused(client: str) -> Response:
        return await asyncio.wait_for(lookup(capped, "k", "min_offset=0&wait_ms=5000", client), 1)

    async def scenario() -> tuple[list[Response], list[Response]]:
        parked = [park("10.0.0.1"), park("10.0.0.1")]
        await asyncio.sleep(0.05)
        over = [await refused("10.0.0.1")]  # its own cap: 2
        parked.append(park("10.0.0.2"))
        await asyncio.sleep(0.05)
        over.append(await refused("10.0.0.3"))  # the node's cap: 3
        assert parking(capped).parked == 3
        await asyncio.to_thread(land, capped, "k", b"7", 0)
        return list(await asyncio.wait_for(asyncio.gather(*parked), 2)), over

    answered, over = asyncio.run(scenario())
    for answer in over:
        assert answer.status == 429, answer.body
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["error"] == "rate_limited"
    assert [a.status for a in answered] == [200, 200, 200]
    assert no_waits_left(capped)

    # Places are given back: the same caller parks again.
    again = asyncio.run(lookup(capped, "k", "min_offset=1&wait_ms=50", "10.0.0.1"))
    assert again.status == 503 and again.json()["reason"] == UNAVAILABLE
    assert no_waits_left(capped)


def test_lookups_whose_caller_left_leave_no_wait_behind(node):
    async def scenario() -> None:
        tasks = [
            asyncio.create_task(lookup(node, "k", f"min_offset={1000 + i}&wait_ms=60000"))
            for i in range(20)
        ]
        await asyncio.sleep(0.1)
        assert parking(node).parked == 20 and len(replica_of(node).waits) == 20
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    assert no_waits_left(node)


def test_a_revoked_replica_does_not_hold_its_parked_lookups(node):
    async def scenario() -> tuple[Response, float]:
        parked = asyncio.create_task(lookup(node, "k", "min_offset=5&wait_ms=10000"))
        await asyncio.sleep(0.05)
        revoked = time.monotonic()
        await asyncio.to_thread(replica_of(node).move_to, ReplicaState.REVOKED)
        answer = await asyncio.wait_for(parked, 3.0)
        return answer, time.monotonic() - revoked

    answer, took = asyncio.run(scenario())
    assert answer.status == 503  # no other replica of the partition to ask
    assert took < 1.0
    assert parking(node).parked == 0 and len(replica_of(node).waits) == 0


def test_a_forwarded_batch_waits_within_the_caps(capped):
    """Items of another node's batch park like lookups; over a cap they are BUSY at once."""
    lookups = capped.app.lookups
    alice = VerifiedCaller("alice", Grants(read_all=True), time.time() + 600)

    def batch(min_offset: int, items: int) -> bytes:
        return encode([Lookup("t", b"k", None, min_offset, 5000) for _ in range(items)])

    async def scenario(min_offset: int, items: int, caller: VerifiedCaller | None) -> list[Outcome]:
        answer = asyncio.create_task(lookups.internal(batch(min_offset, items), caller))
        await asyncio.sleep(0.05)
        assert parking(capped).parked == min(items, 2 if caller else 3)
        await asyncio.to_thread(land, capped, "k", b"1", min_offset)
        results = decode_results(await asyncio.wait_for(answer, 2.0))
        refused = [r.reason for r in results if r.outcome is Outcome.BUSY]
        assert all("too many" in reason for reason in refused)
        return [r.outcome for r in results]

    found, busy = Outcome.FOUND, Outcome.BUSY
    # alice's batch: her cap of 2; one without a caller: the node's cap of 3 only
    assert asyncio.run(scenario(0, 3, alice)) == [found, found, busy]
    assert asyncio.run(scenario(1, 4, None)) == [found, found, found, busy]
    assert no_waits_left(capped)

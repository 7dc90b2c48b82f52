"""Waits for an applied offset: released by the materializer as it applies, never polled."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest

from kiq.kafka.reader import Fetched, Record
from kiq.metrics import NodeMetrics
from kiq.replicas.materializer import Materializer
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role
from kiq.replicas.waits import NEVER, OffsetWaits, Parking, wait_applied
from kiq.stores import MemoryPartitionStore
from kiq.tables import TableRuntime, TableSpec
from kiq.tables.codecs import JsonCodec
from tests.unit.replicas.test_materializer import StandInReader, StandInRecord

TOPIC = "topic-t"


def materializer() -> tuple[Materializer, Replica]:
    spec = TableSpec(name="t", topic=TOPIC)
    m = Materializer(
        StandInReader(),  # type: ignore[arg-type]
        {"t": TableRuntime(spec, JsonCodec(), 1)},
        lambda table, partition: MemoryPartitionStore(),
        None,  # type: ignore[arg-type]
        NodeMetrics(),
    )
    m.reconcile({("t", 0): Role.ACTIVE})
    m._apply_wanted()
    replica = m.replica("t", 0)
    assert replica is not None and replica.applied_offset == -1
    return m, replica


def records(*offsets: int) -> Fetched:
    batch: list[Record] = [StandInRecord(b"k", b"1", at) for at in offsets]
    return Fetched({(TOPIC, 0): batch})


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


def test_a_wait_is_released_when_the_materializer_applies_its_offset(no_polling):
    m, replica = materializer()

    async def scenario() -> tuple[bool, float]:
        waiting = asyncio.create_task(wait_applied(replica, 3, 10.0))
        await asyncio.sleep(0.05)
        assert not waiting.done() and len(replica.waits) == 1 and replica.waits.lowest == 3
        await asyncio.to_thread(m._apply, records(0, 1))  # not yet
        await asyncio.sleep(0.05)
        assert not waiting.done()
        applied_at = time.monotonic()
        await asyncio.to_thread(m._apply, records(2, 3, 4))  # from another thread, as it runs
        reached = await waiting
        return reached, time.monotonic() - applied_at

    reached, took = asyncio.run(scenario())
    assert reached and took < 0.5
    assert no_polling == []  # woken, not polled
    assert len(replica.waits) == 0 and replica.waits.lowest == NEVER


def test_skipped_offsets_at_the_log_end_release_waits_too():
    m, replica = materializer()

    async def scenario() -> bool:
        waiting = asyncio.create_task(wait_applied(replica, 9, 10.0))
        await asyncio.sleep(0.01)
        # The log ends at 10: offsets up to 9 were compacted away or control records.
        await asyncio.to_thread(m._apply, Fetched(ends={(TOPIC, 0): 10}))
        return await asyncio.wait_for(waiting, 1.0)

    assert asyncio.run(scenario())


def test_only_the_waits_an_applied_offset_satisfies_are_released():
    m, replica = materializer()

    async def scenario() -> None:
        low = asyncio.create_task(wait_applied(replica, 1, 10.0))
        high = asyncio.create_task(wait_applied(replica, 5, 10.0))
        await asyncio.sleep(0.01)
        assert replica.waits.lowest == 1
        await asyncio.to_thread(m._apply, records(0, 1, 2))
        assert await asyncio.wait_for(low, 1.0)
        await asyncio.sleep(0.02)
        assert not high.done() and replica.waits.lowest == 5 and len(replica.waits) == 1
        await asyncio.to_thread(m._apply, records(3, 4, 5))
        assert await asyncio.wait_for(high, 1.0)

    asyncio.run(scenario())
    assert len(replica.waits) == 0


def test_nobody_waiting_costs_the_materializer_no_call(monkeypatch: pytest.MonkeyPatch):
    m, replica = materializer()
    released: list[int] = []
    monkeypatch.setattr(OffsetWaits, "reached", lambda self, applied: released.append(applied))
    m._apply(records(0, 1, 2))
    m._apply(Fetched(ends={(TOPIC, 0): 7}))
    assert replica.applied_offset == 6 and released == []


def test_a_wait_times_out_on_the_loop_timer_and_leaves_nothing_behind(no_polling):
    _, replica = materializer()

    async def scenario() -> tuple[list[bool], float]:
        started = time.monotonic()
        outcomes = await asyncio.gather(*(wait_applied(replica, 10**9, 0.15) for _ in range(50)))
        return outcomes, time.monotonic() - started

    outcomes, took = asyncio.run(scenario())
    assert outcomes == [False] * 50
    assert 0.14 <= took < 1.0
    assert no_polling == []
    waits = replica.waits
    assert len(waits) == 0 and waits.lowest == NEVER and waits._heap == []  # no leak


def test_a_cancelled_wait_removes_itself():
    _, replica = materializer()

    async def scenario() -> None:
        tasks = [asyncio.create_task(wait_applied(replica, 100 + i, 60.0)) for i in range(10)]
        await asyncio.sleep(0.01)
        assert len(replica.waits) == 10 and replica.waits.lowest == 100
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        assert len(replica.waits) == 9 and replica.waits.lowest == 101
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    assert len(replica.waits) == 0 and replica.waits._heap == []
    assert replica.waits.lowest == NEVER


def test_revoking_a_replica_releases_its_waits_and_refuses_later_ones():
    _, replica = materializer()

    async def scenario() -> None:
        waiting = asyncio.create_task(wait_applied(replica, 5, 60.0))
        await asyncio.sleep(0.01)
        await asyncio.to_thread(replica.move_to, ReplicaState.REVOKED)  # the materializer's
        assert await asyncio.wait_for(waiting, 1.0) is False
        started = time.monotonic()
        assert await wait_applied(replica, 5, 60.0) is False
        assert time.monotonic() - started < 0.5

    asyncio.run(scenario())
    assert len(replica.waits) == 0


def test_an_offset_applied_already_needs_no_wait():
    m, replica = materializer()
    m._apply(records(0))

    async def scenario() -> None:
        assert await wait_applied(replica, 0, 60.0)
        assert await wait_applied(replica, 1, 0.0) is False  # no time to wait: at once

    asyncio.run(scenario())
    assert len(replica.waits) == 0


def test_a_release_to_a_closed_loop_is_dropped():
    """A wait whose loop ended (a test's, a stopped server's) must not break the thread."""
    waits = OffsetWaits()

    async def park() -> None:
        waits.park(3)

    asyncio.run(park())
    waits.reached(5)  # its loop is closed: nothing to wake, no error
    assert len(waits) == 0


def test_parking_caps_waits_per_node_and_per_caller():
    parking = Parking(most=3, most_per_caller=2)
    assert parking.enter("a") and parking.enter("a")
    assert not parking.enter("a")  # a's cap
    assert parking.enter(None)  # a forwarded batch without a caller: the node's cap only
    assert not parking.enter("b")  # the node's cap
    assert parking.parked == 3 and parking.held_by("a") == 2
    parking.leave("a")
    assert parking.enter("b")
    for caller in ("a", "b", None):
        parking.leave(caller)
    assert parking.parked == 0 and parking.held_by("a") == 0 and parking._by_caller == {}

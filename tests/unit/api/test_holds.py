"""No caller holds the node: watch streams and requests open per caller are capped, and
every way a stream or a request ends gives its place back (api/holds.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from kiq.api.holds import Held, Holds, NodeFull, TooManyHeld
from kiq.api.sse import send_stream
from kiq.api.watch import SubscriptionFrames, WatchApi
from kiq.live import Watches
from kiq.replicas.taps import Taps
from kiq.settings import LimitsSettings


def test_a_caller_past_its_cap_is_told_which_limit_and_how_to_raise_it():
    holds = Holds("watch streams", 2, 100, "max_watches_per_caller")
    first, _ = holds.take("alice"), holds.take("alice")
    with pytest.raises(TooManyHeld) as refused:
        holds.take("alice")
    err = refused.value
    assert err.status == 429 and (b"retry-after", b"5") in err.headers
    assert "max_watches_per_caller = 2" in err.message
    assert orjson.loads(err.body())["limit"] == "max_watches_per_caller"
    holds.take("bob").release()  # another caller is not held back by alice
    first.release()
    first.release()  # once only
    assert holds.held_by("alice") == 1 and holds.held == 1
    holds.take("alice")


def test_the_node_cap_counts_every_caller_and_an_idle_caller_costs_nothing():
    holds = Holds("requests", 10, 3, "max_requests_per_caller")
    taken = [holds.take(c) for c in ("a", "b", None)]
    with pytest.raises(NodeFull) as full:
        holds.take("c")
    assert full.value.status == 503 and "max_connections" in full.value.message
    for hold in taken:
        hold.release()
    assert holds.held == 0 and holds.callers() == 0


def test_the_slots_leave_room_for_health_and_peers():
    limits = LimitsSettings()
    assert limits.request_slots == 2048 - 256 and limits.stream_slots == 2048 - 256
    assert limits.max_watches_per_caller * 8 < limits.stream_slots
    small = LimitsSettings(max_connections=10)
    assert small.request_slots == 5  # the reserve is at most half the slots


def test_a_request_gives_its_place_back_however_it_ends():
    holds = Holds("requests", 1, 10, "max_requests_per_caller")

    async def fails(scope: Any, receive: Any, send: Any) -> None:
        raise ValueError("boom")

    async def hangs(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(60)

    scope = {"type": "http", "client": ("10.0.0.1", 5), "kiq.subject": "alice"}

    async def scenario() -> None:
        with pytest.raises(ValueError):
            await Held(fails, holds)(scope, None, None)  # type: ignore[arg-type]
        assert holds.held == 0
        task = asyncio.create_task(Held(hangs, holds)(scope, None, None))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert holds.held_by("alice") == 1
        with pytest.raises(TooManyHeld):
            await Held(hangs, holds)(scope, None, None)  # type: ignore[arg-type]
        task.cancel()  # the client went, or the server stops
        with pytest.raises(asyncio.CancelledError):
            await task
        assert holds.held == 0

    asyncio.run(scenario())


class _NoReplica:
    """A reader with no replica anywhere: every relay finds none (the stream stays open)."""

    here = None

    async def changes(self, asked: Any, caller: Any) -> None:
        return None


def _watch_api(per_caller: int) -> WatchApi:
    watches = Watches("n1", {}, Taps(), _NoReplica(), max_watches=100)  # type: ignore[arg-type]
    node = SimpleNamespace(tables={}, partition_of=lambda runtime, key: 0)
    holds = Holds("watch streams", per_caller, 100, "max_watches_per_caller")
    return WatchApi(node, watches, holds)  # type: ignore[arg-type]


RUNTIME = SimpleNamespace(spec=SimpleNamespace(name="t", key_separator=None), partitions=1)


def test_a_stream_whose_client_goes_gives_its_watch_back():
    api = _watch_api(per_caller=2)

    async def scenario() -> None:
        subs = [await api.open(RUNTIME, [b"k"], [], None, "alice") for _ in range(2)]  # type: ignore[arg-type]
        with pytest.raises(TooManyHeld):
            await api.open(RUNTIME, [b"k"], [], None, "alice")  # type: ignore[arg-type]
        await api.open(RUNTIME, [b"k"], [], None, "bob")  # type: ignore[arg-type]
        assert api.watches.count == 3

        gone = asyncio.Event()
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        frames = SubscriptionFrames(api.watches, subs[0], RUNTIME)  # type: ignore[arg-type]
        stream = asyncio.create_task(send_stream(send, receive, frames, heartbeat_s=0.01))
        await asyncio.sleep(0.05)
        gone.set()  # the client disconnects
        await asyncio.wait_for(stream, 2)
        assert api.holds is not None and api.holds.held_by("alice") == 1
        assert api.watches.count == 2
        frames.close()  # closed twice: given back once
        assert api.holds.held_by("alice") == 1 and api.watches.count == 2
        await api.open(RUNTIME, [b"k"], [], None, "alice")  # type: ignore[arg-type]
        api.watches.close()

    asyncio.run(scenario())


def test_a_watch_whose_open_is_cancelled_gives_its_place_back():
    api = _watch_api(per_caller=1)

    class Slow(_NoReplica):
        async def changes(self, asked: Any, caller: Any) -> None:
            await asyncio.sleep(60)

    api.watches._reader = Slow()  # type: ignore[assignment]

    async def scenario() -> None:
        opening = asyncio.create_task(api.open(RUNTIME, [b"k"], [], None, "alice"))  # type: ignore[arg-type]
        await asyncio.sleep(0.02)
        assert api.holds is not None and api.holds.held_by("alice") == 1
        opening.cancel()  # the client went during the snapshot
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert api.holds.held == 0 and api.watches.count == 0
        api.watches.close()

    asyncio.run(scenario())

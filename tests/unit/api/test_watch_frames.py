"""A watch's events as SSE frames: encoded once per change, whatever its subscribers."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from kiq.api import watch
from kiq.api.watch import SubscriptionFrames, event_json
from kiq.live import Event, Kind
from kiq.live.subscription import Subscription

RUNTIME: Any = SimpleNamespace(spec=SimpleNamespace(name="t", format="json"))


def ev(offset: int) -> Event:
    return Event("t", b"a", Kind.VALUE, b'{"v":%d}' % offset, 0, offset, "n1", False, 0)


def test_a_change_is_encoded_once_for_all_its_subscribers(monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    encode = watch._encode

    def counted(runtime: Any, event: Event) -> bytes:
        calls.append(event.offset)
        return encode(runtime, event)

    monkeypatch.setattr(watch, "_encode", counted)
    event = ev(5)
    first = event_json(RUNTIME, event)
    assert event_json(RUNTIME, event) is first and calls == [5]
    assert orjson.loads(first)["value"] == {"v": 5}
    # A subscriber that sees the change as its snapshot gets its own encoding.
    snap = replace(event, snapshot=True)
    assert orjson.loads(event_json(RUNTIME, snap))["snapshot"] is True
    assert calls == [5, 5] and orjson.loads(first)["snapshot"] is False


def test_frames_keep_the_wire_format():
    subs = [Subscription("t", frozenset([b"a"]), (), (0,), 100) for _ in range(2)]
    watches: Any = SimpleNamespace(unsubscribe=lambda sub: None)
    event = ev(7)
    for sub in subs:
        sub.last[b"a"] = 6  # its snapshot told: this is a change
        sub.offer(event)

    async def both() -> list[list[bytes] | None]:
        return [await SubscriptionFrames(watches, s, RUNTIME).next(1.0) for s in subs]

    sent = asyncio.run(both())
    expected = (
        b'id: 7\nevent: value\ndata: {"table":"t","key":"a","partition":0,"offset":7,'
        b'"value":{"v":7},"served_by":"n1","stale":false,"lag":0,"snapshot":false}\n\n'
    )
    assert sent == [[expected], [expected]]

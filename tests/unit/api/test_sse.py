"""The one writer of Server-Sent Events: frames, heartbeats, the end, a client that goes."""

from __future__ import annotations

import asyncio
from typing import Any

from kiq.api import sse


class Script:
    """Frames from a list: each entry is what one ``next`` gives (after a wait, if a float)."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps
        self.closed = False

    async def next(self, timeout_s: float) -> list[bytes] | None:
        step = self.steps.pop(0) if self.steps else None
        if isinstance(step, float):
            await asyncio.sleep(step)
            return []
        return step

    def close(self) -> None:
        self.closed = True


def run(frames: Script, gone_after_s: float | None = None) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        await asyncio.sleep(3600 if gone_after_s is None else gone_after_s)
        return {"type": "http.disconnect"}

    asyncio.run(asyncio.wait_for(sse.send_stream(send, receive, frames), 5))
    return sent


def test_frames_then_a_heartbeat_then_the_end():
    frames = Script([[sse.frame(b'{"a":1}', "value", "7")], 0.01, None])
    sent = run(frames)
    assert sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    bodies = [m["body"] for m in sent[1:]]
    assert bodies == [b'id: 7\nevent: value\ndata: {"a":1}\n\n', sse.HEARTBEAT, b""]
    assert sent[-1]["more_body"] is False and frames.closed


def test_a_client_that_goes_ends_the_stream_and_closes_the_source():
    frames = Script([10.0])  # nothing to send for long
    sent = run(frames, gone_after_s=0.05)
    assert [m["type"] for m in sent] == ["http.response.start"] and frames.closed


def test_a_frame_without_id_or_event_is_data_alone():
    assert sse.frame(b"{}") == b"data: {}\n\n"


def test_a_client_that_takes_no_write_is_dropped(monkeypatch):
    monkeypatch.setattr(sse, "SEND_TIMEOUT_S", 0.05)
    frames = Script([[b"data: 1\n\n"], [b"data: 2\n\n"]])
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)
        if message.get("body") == b"data: 2\n\n":
            await asyncio.sleep(3600)  # the client's socket is full

    async def receive() -> Any:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def main() -> None:
        task = asyncio.create_task(sse.send_stream(send, receive, frames))
        await asyncio.wait_for(task, 5)
        assert not task.cancelled() and task.cancelling() == 0

    asyncio.run(main())
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n", b"data: 2\n\n"]
    assert frames.closed


def test_each_stream_counts_as_open_until_its_writer_ends():
    from kiq.api.long_lived import STREAMS

    before = STREAMS.open
    seen: list[int] = []

    class Counting(Script):
        async def next(self, timeout_s: float) -> list[bytes] | None:
            seen.append(STREAMS.open)
            return await super().next(timeout_s)

    run(Counting([[sse.frame(b"{}")], None]))  # the stream ends
    run(Counting([10.0]), gone_after_s=0.05)  # the client goes
    assert seen and all(n == before + 1 for n in seen) and STREAMS.open == before

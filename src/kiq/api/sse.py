"""Server-Sent Events: one writer for every stream a node sends (watches, an app's streams).

A stream is a ``Frames`` source: each call gives the frames ready now, ``[]`` when none
came within the heartbeat interval (a comment goes out then, so proxies and clients see
the connection alive), or None at its end. The writer stops when the client goes (its
``http.disconnect``), and drops a client that has not taken a write for ``SEND_TIMEOUT_S``
(its socket full: the source keeps only the latest state meanwhile, never a queue).
An open stream's objects are kept out of the collector's full passes (``long_lived``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from kiq.api.long_lived import STREAMS

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
SEND_TIMEOUT_S = 30.0
HEARTBEAT = b": hb\n\n"
_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # a buffering reverse proxy would hold events back
]


class Frames(Protocol):
    async def next(self, timeout_s: float) -> list[bytes] | None:
        """The frames ready within ``timeout_s`` (``[]``: none), or None: the stream ended."""
        ...

    def close(self) -> None:
        """The stream is over (the client went, or it ended): release what it holds."""
        ...


def frame(data: bytes, event: str | None = None, id: str | None = None) -> bytes:
    """One event: ``data`` must be one line (JSON is)."""
    head = b""
    if id is not None:
        head += b"id: " + id.encode() + b"\n"
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    return head + b"data: " + data + b"\n\n"


async def send_stream(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
    frames: Frames,
    headers: list[tuple[bytes, bytes]] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> None:
    """Writes ``frames`` as ``text/event-stream`` until it ends or the client goes.

    The frames are written by a task of their own, and this one waits for the client to
    go: an event then resumes the writer's few coroutines, not the route's whole chain
    of middleware above this call, which every event resumed when this task wrote
    (``kiq bench watch``). ``Frames.next`` must be safe to cancel."""
    try:
        await send(
            {"type": "http.response.start", "status": 200, "headers": _HEADERS + (headers or [])}
        )
    except BaseException:
        frames.close()
        raise
    here = asyncio.current_task()
    writer = asyncio.get_running_loop().create_task(_write(send, frames, heartbeat_s))
    STREAMS.opened()
    writer.add_done_callback(_closed)
    listening = False

    def ended(_: object) -> None:
        if listening and here is not None:
            here.cancel()  # delivered where this task waits for the client, nowhere else

    writer.add_done_callback(ended)
    try:
        listening = True
        try:
            await _disconnected(receive)
        finally:
            listening = False
    except asyncio.CancelledError:
        if not writer.done():
            writer.cancel()
            raise  # not the writer ending: the server stopping
        if here is not None:
            here.uncancel()
    else:
        writer.cancel()  # the client went
    with contextlib.suppress(asyncio.CancelledError):
        await writer  # its end, or what it raised


def _closed(_: object) -> None:
    STREAMS.closed()


async def _write(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    frames: Frames,
    heartbeat_s: float,
) -> None:
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    stuck = False  # a write outlived SEND_TIMEOUT_S: this task was cancelled for it

    def too_slow() -> None:
        nonlocal stuck
        stuck = True
        if me is not None:
            me.cancel()

    try:
        while True:
            batch = await frames.next(heartbeat_s)
            body = HEARTBEAT if batch == [] else b"".join(batch or ())
            if body:
                # A bare timer, not ``asyncio.timeout``: one per write, and a write seldom waits.
                timer = loop.call_later(SEND_TIMEOUT_S, too_slow)
                try:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                finally:
                    timer.cancel()
            if batch is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
    except asyncio.CancelledError:
        if not stuck:
            raise
        if me is not None:
            me.uncancel()
        log.info("event stream dropped: the client took nothing for %.0fs", SEND_TIMEOUT_S)
    except OSError:
        pass  # the client went while we wrote
    finally:
        frames.close()


async def _disconnected(receive: Callable[[], Awaitable[MutableMapping[str, Any]]]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return

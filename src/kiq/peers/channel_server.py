"""The receiving end of a peer's channel: ``GET /v1/internal/channel``, upgraded.

A peer sends its forwarded lookup batches as messages on one WebSocket
(``peers/channel.py``) instead of a ``POST /v1/internal/lookups`` each: the server
then hands over one message per batch, with no request head to parse, no scope, no
router. Each ``ChannelAsk`` is checked as its request would be: the upgrade by the
internal paths' rule, each batch by ``Access.member`` over the same method, path, body,
credential and statement, and its answer sealed by ``Access.seal``. A batch answerable
at once is answered before the next message is read; one that waits for
``min_offset`` is answered by a task of its own, so answers may come out of order
(the ``id`` pairs them). A channel upgraded with the ``kiq-reads`` subprotocol carries
the small reads of a fan-out too (``ChannelAsk.path``, one of the ``reads`` it is given):
each checked as its POST would be, over its own path, and answered by a task of its own
through the same handler as that POST, counted under that route. A channel upgraded with
``kiq-packed`` (a peer of this kiq offers it first) carries lists: each message a list of
asks, each answer message the answers finished in one turn of the loop (``_Outbox``).
What a batch raises is
its answer's status and body, as
``error_response`` makes them on every route; a message that is no ``ChannelAsk``
closes the channel.

A node that is stopping closes its channels itself, with close code 1001 (going away,
``going_away``), before its server is told to stop: granian, once stopping, keeps an
upgraded connection open but never delivers what the application sends on it, so the
peers' batches in flight would wait out their timeout, and the server would wait for
the peers to hang up. Told, a peer fails those batches at once and asks another
replica. A channel opened after that is accepted and closed the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping
from typing import Any, Protocol

from kiq import formats
from kiq.http_errors import NoRoute, Unavailable
from kiq.peers import wire
from kiq.peers.frames import GOING_AWAY, POLICY_VIOLATION, UNSUPPORTED_DATA
from kiq.peers.wire import (
    INTERNAL_CHANNEL,
    INTERNAL_LOOKUPS,
    PACKED_PROTOCOL,
    PRINCIPAL,
    READS_PROTOCOL,
    ChannelAnswer,
    ChannelAsk,
    DecodeError,
    decode_channel_ask,
    decode_channel_asks,
    encode,
)
from kiq.security import CLUSTER_HEADER

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class LocalLookups(Protocol):
    """Where a batch is answered: this node's lookups (``kiq.api.lookups.Lookups``)."""

    def internal_now(
        self, body: bytes, caller: Any = None
    ) -> tuple[list[Any], list[Coroutine[Any, Any, None]]]: ...

    def record_internal(self, seconds: float) -> None: ...


class MemberCheck(Protocol):
    """Who may ask, as on every internal path (``kiq.api.auth.Access``)."""

    def check_form(self, scope: Scope) -> None: ...

    def member(
        self, scope: Scope, body: bytes, admin: bool = False, for_caller: bool = True
    ) -> None: ...

    def seal(self, scope: Scope, answer: bytes) -> bytes: ...


# The caller a checked request speaks for (``kiq.api.auth.caller``).
CallerOf = Callable[[Scope], Any]
# A read a channel carries (``ChannelAsk.path``): its body and caller to its answer, as
# its POST's handler gives them (``kiq.api.batches.Batches.internal_scan`` and the like).
Read = Callable[[bytes, Any], Awaitable[bytes]]
# Where an answered read is counted: its path, status and seconds (its route's figures).
Record = Callable[[str, int, float], None]
# An exception as its status and body, as every route answers it (``kiq.api.errors``).
ErrorResponse = Callable[[Exception, Scope], tuple[int, bytes]]
# How a channel's answer goes back: a message of its own, or with the others of its turn.
Deliver = Callable[[ChannelAnswer], Awaitable[None]]

# Reads one channel may have under way at once: a top-many per public request in flight
# at the asking node, bounded there by its own limits.
MAX_READS = 256
_CLUSTER = CLUSTER_HEADER.encode()
_PRINCIPAL = PRINCIPAL.encode()
# What an ask stands for on a node that checks nothing: no headers, nobody's caller.
_OPEN: dict[str, Any] = {"type": "http", "method": "POST", "path": INTERNAL_LOOKUPS, "headers": []}


class LookupChannels:
    """ASGI for the ``websocket`` scope: the lookup channels peers open to this node.

    ``reads``: the reads it answers beside lookup batches, by path (none: lookups alone);
    ``record``: where each is counted. A channel holds at most ``MAX_READS`` reads under
    way; one more is answered 503 at once (the peer asks another replica)."""

    def __init__(
        self,
        lookups: LocalLookups,
        access: MemberCheck | None,
        caller: CallerOf,
        error_response: ErrorResponse,
        reads: Mapping[str, Read] | None = None,
        record: Record | None = None,
    ) -> None:
        self._lookups = lookups
        self._access = access
        self._caller = caller
        self._error_response = error_response
        self._reads = dict(reads or {})
        self._record = record
        # Each open channel: the task reading its asks, and the future set once it ended.
        self._open: dict[asyncio.Task[None], asyncio.Future[None]] = {}
        self._stopping = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        if scope["path"] != INTERNAL_CHANNEL or not self._admitted(scope):
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        offered = scope.get("subprotocols", ()) if self._reads else ()
        chosen = next((p for p in (PACKED_PROTOCOL, READS_PROTOCOL) if p in offered), None)
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if chosen is not None:
            accept["subprotocol"] = chosen
        await send(accept)
        if self._stopping:  # accepted to say so: a refusal would mean "no channel here"
            await _close_quietly(send, GOING_AWAY)
            return
        loop = asyncio.get_running_loop()
        waits: set[asyncio.Task[None]] = set()  # lookup batches waiting, reads under way
        reading: set[asyncio.Task[None]] = set()  # the reads among them
        if chosen == PACKED_PROTOCOL:
            deliver: Deliver = _Outbox(send, waits).put
        else:

            async def deliver(answer: ChannelAnswer) -> None:
                await send({"type": "websocket.send", "bytes": encode(answer)})

        # The asks are read by a task of their own, so that ``going_away`` can cancel its
        # wait in ``receive``: granian sends no close frame while a receive is pending.
        serving = loop.create_task(
            self._serve(receive, send, waits, reading, deliver, chosen == PACKED_PROTOCOL)
        )
        ended = self._open[serving] = loop.create_future()
        try:
            await asyncio.wait((serving,))
            if serving.cancelled():  # this node is going away
                await _close_quietly(send, GOING_AWAY)
            elif (exc := serving.exception()) is not None:  # the peer gone, mid-send
                log.debug("lookup channel ended: %r", exc)
        finally:
            serving.cancel()
            del self._open[serving]
            for task in waits:  # nobody left to answer
                task.cancel()
            ended.set_result(None)

    async def going_away(self, timeout_s: float) -> None:
        """Closes every channel with close code 1001 (its peer fails what it has in flight
        and asks another replica), within ``timeout_s``; later channels are closed so too.

        To be awaited before the server is told to stop: after that, granian delivers
        nothing sent on a websocket, the close frame included."""
        self._stopping = True
        ended = list(self._open.values())
        for reading in self._open:
            reading.cancel()
        if ended:
            await asyncio.wait(ended, timeout=timeout_s)

    async def _serve(
        self,
        receive: Receive,
        send: Send,
        waits: set[asyncio.Task[None]],
        reading: set[asyncio.Task[None]],
        deliver: Deliver,
        packed: bool = False,
    ) -> None:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return  # the peer went away
            data = message.get("bytes")
            try:
                if data is None:
                    asks = None
                elif packed:
                    asks = decode_channel_asks(data)
                else:
                    asks = [decode_channel_ask(data)]
            except DecodeError:
                asks = None
            if asks is None:
                await send({"type": "websocket.close", "code": UNSUPPORTED_DATA})
                return
            for ask in asks:
                if ask.path:
                    answer = self._read(ask, waits, reading, deliver)
                else:
                    answer = self._answer_now(ask, waits, deliver)
                if answer is not None:
                    await deliver(answer)

    def _admitted(self, scope: Scope) -> bool:
        """The upgrade, checked as any internal request: a member's credential for it, in a
        wire this node speaks (``kiq.formats``)."""
        spoken = wire.wire_range(_header(scope, _WIRE))
        if spoken is None:
            return False
        if formats.too_new(
            "peer wire of node", _header(scope, _SENDER) or "?", spoken[0], formats.WIRE
        ):
            return False
        access = self._access
        if access is None:
            return True
        try:
            access.check_form(scope)
            access.member({**scope, "method": "GET"}, b"", for_caller=False)
        except Exception as exc:  # as quiet as a refused request on the internal paths
            log.debug("lookup channel refused: %s", exc)
            return False
        return True

    def _read(
        self,
        ask: ChannelAsk,
        waits: set[asyncio.Task[None]],
        reading: set[asyncio.Task[None]],
        deliver: Deliver,
    ) -> ChannelAnswer | None:
        """A read's answer when it is refused at once; else None, and a task of its own
        answers it (reads answer out of order, as waiting batches do)."""
        request = _as_request(ask)
        try:
            if self._access is not None:
                self._access.member(request, ask.body)
            caller = self._caller(request)
            read = self._reads.get(ask.path)
            if read is None:
                raise NoRoute(f"{ask.path} is no read a channel carries")
            if len(reading) >= MAX_READS:
                raise Unavailable(f"{MAX_READS} reads under way on this channel")
        except Exception as exc:  # answered as its POST would be refused
            status, body = self._error_response(exc, request)
            return ChannelAnswer(ask.id, status, body)
        task = asyncio.get_running_loop().create_task(
            self._answer_read(ask.id, request, read, ask.body, caller, deliver)
        )
        waits.add(task)
        reading.add(task)
        task.add_done_callback(waits.discard)
        task.add_done_callback(reading.discard)
        return None

    async def _answer_read(
        self,
        ask_id: int,
        request: Scope,
        read: Read,
        body: bytes,
        caller: Any,
        deliver: Deliver,
    ) -> None:
        started = time.perf_counter()
        try:
            answer = self._sealed(ask_id, request, await read(body, caller))
        except Exception as exc:  # as its POST would answer it
            status, payload = self._error_response(exc, request)
            answer = ChannelAnswer(ask_id, status, payload)
        if self._record is not None:
            self._record(request["path"], answer.status, time.perf_counter() - started)
        try:
            await deliver(answer)
        except Exception as exc:  # the peer went away meanwhile
            log.debug("channel answer not sent: %r", exc)

    def _answer_now(
        self, ask: ChannelAsk, waits: set[asyncio.Task[None]], deliver: Deliver
    ) -> ChannelAnswer | None:
        """The answer, or None when a task sends it once the batch's waits end."""
        started = time.perf_counter()
        access = self._access
        request = _as_request(ask) if access is not None else _OPEN
        try:
            if access is not None:
                access.member(request, ask.body)
            results, waiting = self._lookups.internal_now(ask.body, self._caller(request))
        except Exception as exc:
            status, body = self._error_response(exc, request)
            return ChannelAnswer(ask.id, status, body)
        if waiting:
            task = asyncio.get_running_loop().create_task(
                self._answer_later(ask.id, request, results, waiting, started, deliver)
            )
            waits.add(task)
            task.add_done_callback(waits.discard)
            return None
        self._lookups.record_internal(time.perf_counter() - started)
        return self._sealed(ask.id, request, encode(results))

    async def _answer_later(
        self,
        ask_id: int,
        request: Scope,
        results: list[Any],
        waiting: list[Any],
        started: float,
        deliver: Deliver,
    ) -> None:
        await asyncio.gather(*waiting)
        self._lookups.record_internal(time.perf_counter() - started)
        answer = self._sealed(ask_id, request, encode(results))
        try:
            await deliver(answer)
        except Exception as exc:  # the peer went away meanwhile
            log.debug("lookup channel answer not sent: %r", exc)

    def _sealed(self, ask_id: int, request: Scope, answer: bytes) -> ChannelAnswer:
        if self._access is not None:
            answer = self._access.seal(request, answer)
        return ChannelAnswer(ask_id, 200, answer)


class _Outbox:
    """A packed channel's answers (``PACKED_PROTOCOL``): those finished in one turn of the
    loop go in one message, sent by a task that starts once the turn is over (kept in the
    channel's ``tasks``, so that its end cancels it). The owner then pays the server's
    send once for them all, not once per read."""

    __slots__ = ("_pending", "_send", "_tasks")

    def __init__(self, send: Send, tasks: set[asyncio.Task[None]]) -> None:
        self._send = send
        self._tasks = tasks
        self._pending: list[ChannelAnswer] = []

    async def put(self, answer: ChannelAnswer) -> None:
        if not self._pending:
            task = asyncio.get_running_loop().create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._pending.append(answer)

    async def _flush(self) -> None:
        answers, self._pending = self._pending, []
        try:
            await self._send({"type": "websocket.send", "bytes": encode(answers)})
        except Exception as exc:  # the peer went away meanwhile
            log.debug("channel answers not sent: %r", exc)


async def _close_quietly(send: Send, code: int) -> None:
    try:
        await send({"type": "websocket.close", "code": code})
    except Exception as exc:  # the peer hung up first
        log.debug("lookup channel close not sent: %r", exc)


def _as_request(ask: ChannelAsk) -> dict[str, Any]:
    """The scope of the ``POST`` the ask stands for (``/v1/internal/lookups`` for a batch):
    what ``Access`` checks and seals by."""
    headers = []
    if ask.credential:
        headers.append((_CLUSTER, ask.credential.encode("latin-1")))
    if ask.principal:
        headers.append((_PRINCIPAL, ask.principal.encode("latin-1")))
    return {
        "type": "http",
        "method": "POST",
        "path": ask.path or INTERNAL_LOOKUPS,
        "query_string": b"",
        "headers": headers,
    }


_WIRE = wire.WIRE.encode()
_SENDER = wire.FORWARDED.encode()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None

"""One application request's position: what its handler has read and written.

Seeded from the request's ``X-Kiq-After`` (not ``?after=``: a route's query is the
application's own), it bounds every read the
handler makes through ``Tables`` (no replica behind it answers), takes in what each
read answered and what each write produced, and goes back to the caller as the
answer's ``X-Kiq-Position``, merged with what a table lookup's own answer says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kiq.api.asgi import Message, Scope, Send
from kiq.app.results import Served
from kiq.positions import AFTER_HEADER, HEADER, Position, decode, encode, merge, of_table

_AFTER = AFTER_HEADER.encode()
_POSITION = HEADER.encode()


class RequestPosition:
    """(table, partition) → offset, for one request; tables by their internal names."""

    __slots__ = ("_position",)

    def __init__(self, seed: Position | None = None) -> None:
        self._position: Position = dict(seed) if seed else {}

    def token(self) -> str:
        return encode(self._position)

    def at_least(self, table: str, partition: int, min_offset: int | None) -> int | None:
        """``min_offset`` raised to what this request has seen of the partition."""
        seen = self._position.get((table, partition))
        if seen is None or (min_offset is not None and min_offset >= seen):
            return min_offset
        return seen

    def of_table(self, table: str) -> dict[int, int]:
        """What this request has seen of ``table``'s partitions (partition → offset)."""
        return of_table(self._position, table)

    def saw(self, table: str, partition: int, offset: int) -> None:
        """A read answered at ``offset``, or a write produced it (-1: unknown, kept out)."""
        key = (table, partition)
        if offset > self._position.get(key, -1):
            self._position[key] = offset

    def read(self, table: str, served: Iterable[Served]) -> None:
        """What the replicas that answered a read of several partitions had applied."""
        for s in served:
            self.saw(table, s.partition, s.applied_offset)

    def into(self, scope: Scope) -> Scope:
        """``scope`` with this position as its ``X-Kiq-After`` (itself when empty)."""
        if not self._position:
            return scope
        headers = [(k, v) for k, v in scope["headers"] if k != _AFTER]
        headers.append((_AFTER, self.token().encode()))
        return {**scope, "headers": headers}

    def stamping(self, send: Send) -> Send:
        """``send`` whose answer carries this position, merged with the one it has."""

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = self._stamp(message)
            await send(message)

        return stamped

    def _stamp(self, message: Message) -> Message:
        own: Position = {}
        kept: list[Any] = []
        for k, v in message.get("headers", ()):
            if bytes(k).lower() == _POSITION:
                own = merge(own, decode(bytes(v).decode("latin-1")))
            else:
                kept.append((k, v))
        position = merge(self._position, own)
        if not position:
            return message
        kept.append((_POSITION, encode(position).encode()))
        return {**message, "headers": kept}

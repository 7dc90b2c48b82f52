"""The watch routes: a key's (or keys', or a prefix's) changes as Server-Sent Events.

    GET  /v1/tables/{table}/keys/{key}/watch      one key
    GET  /v1/tables/{table}/watch?keys=a,b,c      several keys (or ?prefix=P)
    POST /v1/tables/{table}/watch                 {"keys": [...], "prefix": "P"}

The first events are the snapshot (``value``, or ``absent``), then one per change
(``value``, ``delete``, ``expire``); each names its key, partition, offset, the node its
replica is on, whether that replica was a standby (``stale``) and its lag. ``id:`` is
the offset for one key, else a cursor over the partitions; ``Last-Event-ID`` resumes after
it. A subscriber dropped for being slow gets ``event: dropped`` (kiq.live.subscription).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kiq.api.batches import value_json
from kiq.api.errors import ApiError, BadRequest, UnknownTable
from kiq.api.holds import Holds
from kiq.api.params import check_key
from kiq.api.sse import frame
from kiq.live import Cursor, Event, Subscription, Watches
from kiq.live.events import BadCursor
from kiq.node import NodeView
from kiq.tables import TableRuntime

MAX_WATCH_KEYS = 1_000  # keys in one stream


class TooManyWatches(ApiError):
    status, code = 503, "too_many_watches"
    retriable = True

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.headers = ((b"retry-after", b"5"),)


def event_json(runtime: TableRuntime, event: Event) -> bytes:
    """``event`` as its ``data:`` line, encoded once for all the subscribers it reaches."""
    wire = event.wire
    if wire is None:
        wire = _encode(runtime, event)
        object.__setattr__(event, "wire", wire)  # a cache of the frozen event's own fields
    return wire


def _encode(runtime: TableRuntime, event: Event) -> bytes:
    return orjson.dumps(
        {
            "table": event.table,
            "key": event.key.decode(),
            "partition": event.partition,
            "offset": event.offset,
            "value": None if event.value is None else value_json(runtime, event.value),
            "served_by": event.served_by,
            "stale": event.stale,
            "lag": event.lag,
            "snapshot": event.snapshot,
        }
    )


class SubscriptionFrames:
    """A subscription as SSE frames (``api.sse.Frames``)."""

    def __init__(self, watches: Watches, sub: Subscription, runtime: TableRuntime) -> None:
        self._watches = watches
        self._sub = sub
        self._runtime = runtime
        self._ended = False

    async def next(self, timeout_s: float) -> list[bytes] | None:
        sub = self._sub
        if self._ended:
            return None
        cursor = None if sub.single else sub.cursor()
        events = await sub.take(timeout_s)
        frames = []
        for i, event in enumerate(events):
            id: str | None = str(event.offset) if sub.single else None
            if not sub.single and i == len(events) - 1:
                id = cursor
            frames.append(frame(event_json(self._runtime, event), event.kind.value, id))
        if sub.dropped is not None:
            self._ended = True
            frames.append(frame(orjson.dumps({"reason": sub.dropped}), "dropped"))
        return frames

    def close(self) -> None:
        self._watches.unsubscribe(self._sub)


class WatchApi:
    """``holds``: the watch streams open per caller and on the node (api/holds.py)."""

    def __init__(self, node: NodeView, watches: Watches, holds: Holds | None = None) -> None:
        self.node = node
        self.watches = watches
        self.holds = holds

    def runtime(self, table: str) -> TableRuntime:
        runtime = self.node.tables.get(table)
        if runtime is None:
            raise UnknownTable(f"no table named {table!r}", table=table)
        return runtime

    async def open(
        self,
        runtime: TableRuntime,
        keys: list[bytes],
        prefixes: list[bytes],
        last_event_id: str | None,
        caller: str | None = None,
    ) -> Subscription:
        """A subscription with its snapshot; 400s for bad input, 429 when ``caller`` (the
        token's subject, else the client's address; None: an application's own watch) has
        as many open as it may, 503 on a full node. Its hold is given back when it ends."""
        if not keys and not prefixes:
            raise BadRequest("name the keys to watch (keys=a,b,c) or a prefix (prefix=P)")
        if len(keys) > MAX_WATCH_KEYS:
            raise BadRequest(f"at most {MAX_WATCH_KEYS} keys in one watch", count=len(keys))
        if self.watches.full():
            raise TooManyWatches(
                f"this node serves {self.watches.max_watches} watches already; try another "
                "node, or later",
            )
        resume = None
        if last_event_id:
            try:
                resume = Cursor.parse(last_event_id)
            except BadCursor as exc:
                raise BadRequest(str(exc)) from None
        by_key: dict[int, list[bytes]] = {}
        for key in dict.fromkeys(keys):
            check_key(key)
            by_key.setdefault(self.node.partition_of(runtime, key.decode()), []).append(key)
        by_prefix: dict[int, list[bytes]] = {}
        for prefix in prefixes:
            for p in self._prefix_partitions(runtime, prefix):
                by_prefix.setdefault(p, []).append(prefix)
        hold = self.holds.take(caller) if self.holds is not None else None
        try:
            return await self.watches.subscribe(
                runtime.spec.name,
                by_key,
                by_prefix,
                resume,
                on_end=None if hold is None else hold.release,
            )
        except BaseException:
            if hold is not None:
                hold.release()  # once only: the failed subscribe may have given it back
            raise

    def _prefix_partitions(self, runtime: TableRuntime, prefix: bytes) -> range | list[int]:
        """The partitions a prefix's keys can be in: one when it names the partition key."""
        sep = runtime.spec.key_separator
        text = prefix.decode()
        if sep is not None and sep in text:
            return [self.node.partition_of(runtime, text)]
        return range(runtime.partitions)


def keys_of(params: Mapping[str, str]) -> tuple[list[bytes], list[bytes]]:
    """``keys=a,b,c`` and ``prefix=P`` of a query."""
    keys = [k.encode() for k in params.get("keys", "").split(",") if k]
    prefix = params.get("prefix")
    return keys, ([prefix.encode()] if prefix else [])


def keys_of_body(body: Any) -> tuple[list[bytes], list[bytes]]:
    """``{"keys": [...], "prefix": "P"}``."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be {"keys": ["a", ...], "prefix": "P"}')
    keys = body.get("keys") or []
    prefix = body.get("prefix")
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise BadRequest("keys must be a list of non-empty strings")
    if prefix is not None and not (isinstance(prefix, str) and prefix):
        raise BadRequest("prefix must be a non-empty string")
    return [k.encode() for k in keys], ([prefix.encode()] if prefix else [])

"""Multi-key reads and byte-ordered scans, spread over the partitions' replicas.

POST /v1/tables/{table}/multiget groups keys by partition and asks each owner
once; GET /v1/tables/{table}/range asks every partition it may touch (one, when
the prefix fixes the partition) and merges the answers in key order, ascending or
(``order=desc``) descending; GET /v1/tables/{table}/top asks every partition for its head
in the table's rank order (``rank_by``) and merges them into the exact top N;
GET /v1/tables/{table}/by/{field}[/{value}] asks every partition for a page of one of its
indexes (``api/indexes.py``) and merges them by entry bytes, and ``top?by=FIELD`` ranks
by a number index the same way. The
replica reader (``routing/reader.py``) reads each
partition from its best replica, the next when one cannot answer, and says which
replica answered (``Source``: what ``kiq.Tables`` tells of staleness). Values stay
the stored bytes until the response is rendered.

Another node's ``Peers.multiget``, ``Peers.scan``, ``Peers.top``, ``Peers.by_index`` and
``Peers.by_index_many`` (and ``Peers.top_many``) are answered by ``internal_multiget``,
``internal_scan``, ``internal_top``, ``internal_by_index`` and ``internal_by_index_many``
(and ``internal_top_many``), from local replicas only.
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import chain, takewhile
from typing import Any, TypeVar

import msgspec
import orjson

from kiq.api import consistency
from kiq.api.consistency import PLAIN, ReadAt, redo
from kiq.api.errors import (
    BadRequest,
    InsufficientScope,
    NotHere,
    TooLarge,
    Unavailable,
    UnknownTable,
)
from kiq.api.indexes import (
    IndexItem,
    bounds,
    index_cursor,
    index_field,
    indexes,
    parse_bound,
    top_of,
)
from kiq.api.params import bool_param, check_key, decode_cursor, encode_cursor, int_param
from kiq.api.shared import Shared
from kiq.node import NodeView
from kiq.peers import Item, Source
from kiq.peers.wire import (
    LATEST_BATCH as LATEST,
)
from kiq.peers.wire import (
    MAX_INDEX_READS,
    ByIndex,
    DecodeError,
    IndexResult,
    IndexResults,
    MultigetResult,
    ScanResult,
    Top,
    TopResults,
    decode_by_index,
    decode_by_index_many,
    decode_multiget,
    decode_scan,
    decode_top,
    decode_top_many,
    encode,
)
from kiq.routing import ReplicaReader
from kiq.routing.turns import SMALL_PAGE, unpaced
from kiq.security import VerifiedCaller, read_scope
from kiq.stores.base import prefix_end
from kiq.stores.index import equal_bounds, range_bounds, value_of
from kiq.stores.rank import merge_heads
from kiq.tables import MAX_KEY_BYTES, TableRuntime
from kiq.tables.versions import public_name
from kiq.tables.windows import WindowPage, window_time

MAX_RANGE_LIMIT = 1000
# A page's rows: (key, value) of a range, (entry, key, value) of an index.
Row = TypeVar("Row", tuple[bytes, bytes], tuple[bytes, bytes, bytes])
# Reads of a partition a range page takes at most past the first, to fill a page that
# the first reads (each partition's share) left short: a range over few partitions.
MAX_SCAN_ROUNDS = 3
MAX_TOP = 1000  # the most keys one top read answers
# How long a read as of a batch the caller chose waits for a partition to apply it: the
# tables of one query get their markers together, one is due within a fetch or two.
PIN_WAIT_S = 1.0
DEFAULT_LIMIT = 100  # a page's items when no limit is asked

_Page = TypeVar("_Page", ScanResult, IndexResult)


@dataclass(frozen=True, slots=True)
class IndexPage:
    """An index read's page: (entry, key, stored value) in the order asked, the entry a
    next page goes on from (None: the read ended), how many entries the bounds hold over
    every partition (None: not counted), and the replica that answered each partition."""

    items: list[IndexItem]
    last: bytes | None
    count: int | None
    sources: list[Source]


def value_json(runtime: TableRuntime, value: bytes) -> Any:
    """A stored value inside a JSON response: embedded as is, or base64 for raw tables."""
    if runtime.spec.format == "raw":
        return base64.b64encode(value).decode()
    return orjson.Fragment(value)


def items_json(runtime: TableRuntime, items: list[Item]) -> orjson.Fragment:
    """``[{"key", "value"}, ...]`` of a page, as JSON bytes made at once: a thousand rows
    as a thousand dicts were that many objects for the collector to walk, and its pauses
    were the lookups' slowest answers beside a scan."""
    if runtime.spec.format == "raw":
        rows = [b'{"key":%b,"value":"%b"}' % (_text(k), base64.b64encode(v)) for k, v in items]
    else:
        rows = [b'{"key":%b,"value":%b}' % (_text(k), v) for k, v in items]
    return orjson.Fragment(b"[" + b",".join(rows) + b"]")


def _text(key: bytes) -> bytes:
    return orjson.dumps(key.decode())


class Batches:
    def __init__(self, node: NodeView, reader: ReplicaReader, max_keys: int = 10_000) -> None:
        self.node = node
        self.reader = reader  # the node's one ReplicaReader (shared with Lookups)
        self.max_keys = max_keys  # per public multiget: [limits] max_multiget_keys
        self.tops: Shared[tuple[list[Item], list[Source]]] = Shared()  # ``api.shared``

    def _table(self, name: str) -> TableRuntime:
        runtime = self.node.tables.get(name)
        if runtime is None:
            raise UnknownTable(f"no table named {name!r}", table=name)
        return runtime

    # -- multiget ----------------------------------------------------------------

    async def multiget(
        self, table: str, body: bytes, auth: str | None, at: ReadAt = PLAIN
    ) -> Answer:
        runtime = self._table(table)
        try:
            keys = orjson.loads(body)["keys"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise BadRequest('body must be {"keys": ["...", ...]}') from exc
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise BadRequest('"keys" must be a list of strings')
        if len(keys) > self.max_keys:
            raise TooLarge(f"at most {self.max_keys} keys per request", count=len(keys))
        found, missing, unavailable, sources = await self.get_many(runtime, keys, auth, at=at)
        out: dict[str, Any] = {
            "found": {k: value_json(runtime, v) for k, v in found.items()},
            "missing": missing,
        }
        if unavailable:
            out["unavailable"] = unavailable
        return _answer(runtime, out, sources, at)

    async def get_many(
        self,
        runtime: TableRuntime,
        keys: list[str],
        auth: str | None,
        max_lag: int | None = None,
        at: ReadAt = PLAIN,
    ) -> tuple[dict[str, bytes], list[str], list[str], list[Source]]:
        """(found: key → stored value, missing, unavailable, the replica that answered for
        each partition): one call per owner, fallbacks per partition, only replicas within
        ``max_lag`` when given, bounded by ``at`` (``api.consistency``)."""
        by_partition: dict[int, list[bytes]] = defaultdict(list)
        for key in dict.fromkeys(keys):
            raw = key.encode()
            check_key(raw)
            by_partition[self.node.partition_of(runtime, key)].append(raw)
        name = runtime.spec.name
        batch = LATEST if at.consistent else None
        values, unanswered, sources = await self.reader.get_many(
            name, by_partition, auth, max_lag, batch, at.after
        )
        if unanswered and at.after and at.wait_ms:

            async def ask(behind: list[int]) -> list[int]:
                asked = {p: by_partition[p] for p in behind}
                more, still, answered = await self.reader.get_many(
                    name, asked, auth, max_lag, batch, at.after
                )
                values.update(more)
                sources.extend(answered)
                return still

            still = await consistency.waited(at, unanswered, ask)
            unanswered = [p for p in unanswered if p in still or p not in at.after]
        chosen_batch = consistency.pinned(at, sources) if at.consistent else None
        again = redo(sources, chosen_batch)
        if chosen_batch is not None and again:
            as_of = chosen_batch
            for raw in (raw for p in again for raw in by_partition[p]):
                values.pop(raw, None)
            sources = [s for s in sources if s.partition not in again]

            async def ask_as_of(some: list[int]) -> list[int]:
                asked = {p: by_partition[p] for p in some}
                more, refused, answered = await self.reader.get_many(
                    name, asked, auth, max_lag, as_of, at.after
                )
                kept = [s for s in answered if s.batch == as_of]
                for p in {s.partition for s in kept}:
                    values.update((k, v) for k in asked[p] if (v := more.get(k)) is not None)
                sources.extend(kept)
                return [*refused, *(s.partition for s in answered if s.batch != as_of)]

            refused = await consistency.asked_again(
                await ask_as_of(again), ask_as_of, PIN_WAIT_S if at.batch is not None else 0.0
            )
            if refused:
                raise consistency.unavailable(name, refused, chosen_batch)
        found: dict[str, bytes] = {}
        missing: list[str] = []
        nobody = set(unanswered)
        for p, asked in by_partition.items():
            if p in nobody:
                continue
            for raw in asked:
                value = values.get(raw)
                if value is None:
                    missing.append(raw.decode())
                else:
                    found[raw.decode()] = value
        unavailable = [raw.decode() for p in unanswered for raw in by_partition[p]]
        return found, missing, unavailable, sources

    async def internal_multiget(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Another node's ``Peers.multiget``: keys from local replicas, partitions refused.

        ``caller``: whose token came along (None without authentication); it must read
        the table here too.
        """
        try:
            request = decode_multiget(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed multiget: {exc}") from exc
        _may_read(caller, request.table)
        runtime = self.node.tables.get(request.table)
        if runtime is None:
            raise NotHere(f"no table named {request.table!r} here", table=request.table)
        by_partition: dict[int, list[bytes]] = defaultdict(list)
        for key in request.keys:
            check_key(key)
            by_partition[self.node.partition_of(runtime, key.decode())].append(key)
        here = self.reader.here
        found: list[Item] = []
        refused: list[int] = []
        sources: list[Source] = []
        for p, keys in by_partition.items():
            answer = await here.get(
                request.table, p, keys, request.max_lag, request.batch, request.after.get(p)
            )
            if answer is None:
                refused.append(p)
            else:
                found.extend(answer[0])
                sources.append(answer[1])
        return encode(MultigetResult(found, refused, sources))

    # -- range ---------------------------------------------------------------------

    async def range(
        self, table: str, params: dict[str, str], auth: str | None, at: ReadAt = PLAIN
    ) -> Answer:
        runtime = self._table(table)
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or 100
        items, last_key, sources = await self.scan(
            runtime,
            prefix=params.get("prefix", "").encode(),
            start=params.get("from", "").encode() or None,
            end=params.get("to", "").encode() or None,
            cursor=params.get("cursor"),
            limit=limit,
            auth=auth,
            reverse=is_descending(params.get("order")),
            at=at,
        )
        await self.reader.here.turns()  # the answer is a page's worth of work too
        out = items_json(runtime, items)
        next_cursor = encode_cursor(last_key) if last_key is not None else None
        return _answer(runtime, {"items": out, "next_cursor": next_cursor}, sources, at)

    async def windows(
        self,
        table: str,
        key: str,
        params: dict[str, str],
        auth: str | None,
        at: ReadAt = PLAIN,
    ) -> Answer:
        """GET /v1/tables/{table}/keys/{key}/windows: one key's windows in time order."""
        runtime = self._table(table)
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or 100
        cursor, reverse = params.get("cursor"), is_descending(params.get("order"))
        prefix, low, high = _window_range(runtime, key, params.get("from"), params.get("to"))
        render = window_page(runtime, len(prefix))
        if at is PLAIN:  # one partition's page, made where it is and kept there (Scan.windows)
            page, last, sources = await self._window_page(
                runtime, prefix, low, high, cursor, limit, auth, reverse, render
            )
        else:
            items, last, sources = await self.scan(
                runtime, prefix, low, high, cursor, limit, auth, reverse=reverse, at=at
            )
            page = render(items)
        next_cursor = encode_cursor(last) if last is not None else None
        body = {"key": key, "windows": orjson.Fragment(page), "next_cursor": next_cursor}
        return _answer(runtime, body, sources, at)

    async def _window_page(
        self,
        runtime: TableRuntime,
        prefix: bytes,
        low: bytes | None,
        high: bytes | None,
        cursor: str | None,
        limit: int,
        auth: str | None,
        reverse: bool,
        render: WindowPage,
    ) -> tuple[bytes, bytes | None, list[Source]]:
        """The page of the windows under ``prefix`` in [low, high) as ``render`` makes it, by
        the replica that answers (a node of an older kiq sends the rows, made here), and the
        key the next starts after."""
        low, high = _bounds(prefix, low, high, cursor, reverse)
        name, partition = runtime.spec.name, self.node.partition_of(runtime, prefix.decode())
        result = await self.reader.scan(
            name, partition, low, high, limit, auth, reverse, render=render
        )
        if result is None:
            raise Unavailable(f"no replica of {name}[{partition}] could scan", partition=partition)
        if result.page:
            page, rows, last = result.page, result.rows, result.last
        else:
            items = result.items[:limit]
            page, rows, last = render(items), len(items), items[-1][0] if items else b""
        sources = [_sourced(result, partition).source or Source(partition)]
        return page, (last if rows >= limit else None), sources

    async def scan_windows(
        self,
        runtime: TableRuntime,
        key: str,
        start: str | None,
        end: str | None,
        cursor: str | None,
        limit: int,
        auth: str | None,
        reverse: bool = False,
        max_lag: int | None = None,
        at: ReadAt = PLAIN,
    ) -> tuple[list[Item], bytes | None, list[Source]]:
        """``scan`` of one key's windows that start in [``start``, ``end``) (times as
        ``kiq.tables.windows.window_time`` reads them): one partition, in time order."""
        prefix, low, high = _window_range(runtime, key, start, end)
        return await self.scan(
            runtime,
            prefix=prefix,
            start=low,
            end=high,
            cursor=cursor,
            limit=limit,
            auth=auth,
            reverse=reverse,
            max_lag=max_lag,
            at=at,
        )

    async def scan(
        self,
        runtime: TableRuntime,
        prefix: bytes,
        start: bytes | None,
        end: bytes | None,
        cursor: str | None,
        limit: int,
        auth: str | None,
        reverse: bool = False,
        max_lag: int | None = None,
        at: ReadAt = PLAIN,
    ) -> tuple[list[Item], bytes | None, list[Source]]:
        """Up to ``limit`` (key, stored value) in key order (descending when ``reverse``),
        the cursor key when there may be more, and the replica that answered for each
        partition read (only replicas within ``max_lag`` when given).

        The bounds mean the same in either order: keys in [start, end) that start with
        ``prefix``. The cursor is the last key of the previous page: the next page starts
        after it, ascending, or below it, descending.
        """
        start, end = _bounds(prefix, start, end, cursor, reverse)
        partitions: Iterable[int] = range(runtime.partitions)
        fixed = runtime.spec.partition_key(prefix.decode()) if prefix else None
        if fixed is not None and fixed != prefix.decode():
            partitions = [self.node.partition_of(runtime, prefix.decode())]
        name = runtime.spec.name
        asked = list(partitions)
        # As of one batch, every partition is read once (a second read could be of another
        # batch): each asked for the whole page. Otherwise each for its share, then again
        # past its last row while the merge is short (``merge_pages``).
        share = limit if at.consistent else per_partition(limit, len(asked))

        def page(p: int, batch: int | None) -> Awaitable[ScanResult | None]:
            return self.reader.scan(
                name, p, start, end, share, auth, reverse, max_lag, batch, at.after.get(p)
            )

        pages = await _per_partition(name, asked, at, _each(page))
        await self.reader.here.turns()  # the merge: a page's worth of rows
        sources = [page.source for page in pages if page.source is not None]

        async def past(again: list[int], need: int, last: dict[int, bytes]) -> list[ScanResult]:
            def rest(p: int, batch: int | None) -> Awaitable[ScanResult | None]:
                low, high = (start, last[p]) if reverse else (last[p] + b"\x00", end)
                return self.reader.scan(
                    name, p, low, high, need, auth, reverse, max_lag, batch, at.after.get(p)
                )

            return await _per_partition(name, again, at, _each(rest))

        merged, more = await filled(asked, pages, share, limit, reverse, past)
        return merged, (merged[-1][0] if more and merged else None), sources

    async def internal_scan(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Another node's ``Peers.scan``: a page of a local replica, or 421; ``caller`` as
        for ``internal_multiget``."""
        try:
            request = decode_scan(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed scan: {exc}") from exc
        _may_read(caller, request.table)
        if not 1 <= request.limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_RANGE_LIMIT}")
        table, partition = request.table, request.partition
        render = None
        if request.windows:  # a key's windows: the page made here, kept while unchanged
            runtime = self.node.tables.get(table)
            if runtime is None or not runtime.spec.windowed:
                raise NotHere(f"{self.node.node_id} holds no windowed table {table}")
            if not 0 < request.windows <= MAX_KEY_BYTES:
                raise BadRequest(f"windows must be between 1 and {MAX_KEY_BYTES}")
            render = window_page(runtime, request.windows)
        page = await self.reader.here.scan(
            table,
            partition,
            request.start,
            request.end,
            request.limit,
            request.reverse,
            request.max_lag,
            request.batch,
            request.min_offset,
            render,
        )
        if page is None:
            raise NotHere(f"{self.node.node_id} holds no usable replica of {table}[{partition}]")
        return encode(page)

    # -- top -----------------------------------------------------------------------------

    async def top_json(
        self, table: str, params: dict[str, str], auth: str | None, at: ReadAt = PLAIN
    ) -> Answer:
        """GET /v1/tables/{table}/top: ``{"items": [{"key", "value"}], "rank_by"}``; with
        ``by=FIELD``, by a number index of the table (``top_by``)."""
        runtime = self._table(table)
        by = params.get("by") or None
        if by is not None and (by != runtime.spec.rank_by or indexes(runtime, by)):
            if params.get("prefix") or params.get("window"):
                raise BadRequest("top by an index (by=) takes neither prefix nor window")
            n = int_param(params, "n", 1, MAX_TOP) or 10
            ranked, sources = await self.top_by(runtime, by, n, auth, at=at)
            out = items_json(runtime, ranked)
            return _answer(runtime, {"items": out, "rank_by": by}, sources, at)
        field = rank_field(runtime)
        n = int_param(params, "n", 1, MAX_TOP) or 10
        window = top_window(runtime, params.get("window"))
        prefix = params.get("prefix", "").encode()

        def read() -> Awaitable[tuple[list[Item], list[Source]]]:
            return self.top(runtime, n, prefix, auth, window=window, at=at)

        if at is PLAIN:  # the same top asked by many at once: one fan-out (``api.shared``)
            items, sources = await self.tops.read(
                (runtime.spec.name, n, prefix, window, auth), read
            )
        else:
            items, sources = await read()
        out = items_json(runtime, items)
        return _answer(runtime, {"items": out, "rank_by": field}, sources, at)

    async def top(
        self,
        runtime: TableRuntime,
        n: int,
        prefix: bytes,
        auth: str | None,
        max_lag: int | None = None,
        window: bytes = b"",
        at: ReadAt = PLAIN,
    ) -> tuple[list[Item], list[Source]]:
        """The table's first ``n`` (key, stored value) in its rank order (only keys starting
        with ``prefix``, of windows starting at ``window`` when given: ``top_window``), and
        the replica that answered for each partition: every partition asked once for its own
        first ``n``, concurrently, each from its best replica (a peer once for all the
        partitions it is the first choice for), and the heads merged
        (``kiq.stores.rank.merge_heads``). ``Unavailable`` when a partition has no replica
        that answers; a 400 for a table that is not ranked."""
        field = rank_field(runtime)
        table = runtime.spec.name
        fixed = runtime.spec.partition_key(prefix.decode()) if prefix else None
        partitions: Iterable[int] = range(runtime.partitions)
        if fixed is not None and fixed != prefix.decode():  # the prefix names its partition
            partitions = [self.node.partition_of(runtime, prefix.decode())]

        def heads_of(ps: list[int], batch: int | None) -> Awaitable[list[ScanResult | None]]:
            reads = [Top(table, p, n, prefix, max_lag, window, batch, at.after.get(p)) for p in ps]
            return self.reader.top_many(reads, auth)  # one request per peer, not per partition

        heads = await _per_partition(table, list(partitions), at, heads_of, "rank its keys")
        merged = merge_heads((h.items for h in heads), n, field)
        return merged, [h.source for h in heads if h.source is not None]

    async def internal_top(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Another node's ``Peers.top``: a local replica's head, or 421; ``caller`` as for
        ``internal_multiget``."""
        try:
            request = decode_top(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed top: {exc}") from exc
        _may_read(caller, request.table)
        if not 1 <= request.n <= MAX_TOP:
            raise BadRequest(f"n must be between 1 and {MAX_TOP}")
        table, partition = request.table, request.partition
        head = await self.reader.here.top(
            table,
            partition,
            request.n,
            request.prefix,
            request.max_lag,
            request.window,
            request.batch,
            request.min_offset,
        )
        if head is None:
            raise NotHere(
                f"{self.node.node_id} holds no usable ranked replica of {table}[{partition}]"
            )
        return encode(head)

    async def internal_top_many(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Another node's ``Peers.top_many``: each head answered as ``internal_top`` would, in
        order, None for a 421; ``caller`` as for ``internal_multiget``."""
        try:
            request = decode_top_many(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed tops: {exc}") from exc
        if len(request.reads) > MAX_INDEX_READS:
            raise BadRequest(f"at most {MAX_INDEX_READS} tops per request")
        for asked in request.reads:
            _may_read(caller, asked.table)
            if not 1 <= asked.n <= MAX_TOP:
                raise BadRequest(f"n must be between 1 and {MAX_TOP}")
        here = self.reader.here
        # Small plain heads (a top-10's) as the node that asked runs them: no turns taken.
        small = all(r.n <= SMALL_PAGE and not r.prefix and not r.window for r in request.reads)
        with unpaced() if small else nullcontext():
            heads = [
                await here.top(
                    asked.table,
                    asked.partition,
                    asked.n,
                    asked.prefix,
                    asked.max_lag,
                    asked.window,
                    asked.batch,
                    asked.min_offset,
                )
                for asked in request.reads
            ]
        return encode(TopResults(heads))

    # -- secondary indexes (api/indexes.py) ------------------------------------------------

    async def by_index_json(
        self,
        table: str,
        field: str,
        value: str | None,
        params: dict[str, str],
        auth: str | None,
        at: ReadAt = PLAIN,
    ) -> Answer:
        """GET /v1/tables/{table}/by/{field}/{value} (``value``) and .../by/{field}?from=&to=:
        ``{"items": [{"key", "value"}], "next_cursor", "field", "count" (count=true),
        "batch"}``."""
        runtime = self._table(table)
        indexed = index_field(runtime, field)
        count = bool_param(params, "count")
        limit = int_param(params, "limit", 0 if count else 1, MAX_RANGE_LIMIT)
        if value is not None:
            start, end = bounds(indexed, parse_bound(indexed, value, "the value"), None, None)
        else:
            low, high = params.get("from"), params.get("to")
            if indexed.kind == "number":  # an empty bound is none; for a text it is ""
                low, high = low or None, high or None
            start, end = bounds(
                indexed,
                None,
                None if low is None else parse_bound(indexed, low, "from"),
                None if high is None else parse_bound(indexed, high, "to"),
            )
        page = await self.by_index(
            runtime,
            field,
            start,
            end,
            index_cursor(params.get("cursor")),
            DEFAULT_LIMIT if limit is None else limit,
            auth,
            reverse=is_descending(params.get("order")),
            count=count,
            max_lag=int_param(params, "max_lag"),
            at=at,
        )
        out = items_json(runtime, [(k, v) for _, k, v in page.items])
        body: dict[str, Any] = {
            "items": out,
            "next_cursor": encode_cursor(page.last) if page.last is not None else None,
            "field": field,
        }
        if count:
            body["count"] = page.count
        body["batch"] = None
        return _answer(runtime, body, page.sources, at)

    async def by_index(
        self,
        runtime: TableRuntime,
        field: str,
        start: bytes,
        end: bytes,
        cursor: bytes | None,
        limit: int,
        auth: str | None,
        reverse: bool = False,
        count: bool = False,
        max_lag: int | None = None,
        at: ReadAt = PLAIN,
    ) -> IndexPage:
        """Up to ``limit`` entries of ``field``'s index in [start, end) past ``cursor``, in
        entry order (descending when ``reverse``): every partition asked concurrently, each
        from its best replica, for its share of the page (again past its last entry while
        the page is short, as ``scan``), the pages merged by entry bytes. ``count``: how
        many entries [start, end) holds in every partition, the cursor aside.
        ``Unavailable`` when a partition has no replica that answers."""
        name = runtime.spec.name
        partitions = list(range(runtime.partitions))
        share = limit if at.consistent or limit <= 0 else per_partition(limit, len(partitions))

        def reading(
            size: int, counting: bool, after: dict[int, bytes]
        ) -> Callable[[list[int], int | None], Awaitable[list[IndexResult | None]]]:
            def page(ps: list[int], batch: int | None) -> Awaitable[list[IndexResult | None]]:
                reads = [
                    ByIndex(
                        name,
                        p,
                        field,
                        start,
                        end,
                        size,
                        reverse,
                        counting,
                        max_lag,
                        batch,
                        min_offset=at.after.get(p),
                        cursor=after.get(p, cursor),
                    )
                    for p in ps
                ]
                return self.reader.by_index_many(reads, auth)

            return page

        what = f"read its index of {field}"
        pages = await _per_partition(name, partitions, at, reading(share, count, {}), what)
        total = sum(p.count for p in pages) if count else None
        sources = [p.source for p in pages if p.source is not None]
        if limit <= 0:
            return IndexPage([], None, total, sources)

        async def past(again: list[int], need: int, last: dict[int, bytes]) -> list[IndexResult]:
            return await _per_partition(name, again, at, reading(need, False, last), what)

        merged, more = await filled(partitions, pages, share, limit, reverse, past)
        return IndexPage(merged, merged[-1][0] if more and merged else None, total, sources)

    async def top_by(
        self,
        runtime: TableRuntime,
        field: str,
        n: int,
        auth: str | None,
        max_lag: int | None = None,
        at: ReadAt = PLAIN,
    ) -> tuple[list[Item], list[Source]]:
        """The ``n`` keys with the highest ``field`` (a number index), ties by key as
        ``top``'s: each partition read for its ``n`` highest entries, then for the entries
        tied with its ``n``th in key order (a descending read meets those last), and the
        candidates merged. A 400 for a text index, a 404 for a field not indexed."""
        indexed = index_field(runtime, field)
        if indexed.kind != "number":
            raise BadRequest(
                f"top by={field} needs a number index; {field} is a text index",
                table=runtime.spec.table,
            )
        name = runtime.spec.name
        low, high = range_bounds("number", None, None)

        async def head(ps: list[int], batch: int | None) -> list[IndexResult | None]:
            firsts = await self.reader.by_index_many(
                [
                    ByIndex(
                        name, p, field, low, high, n, True, False, max_lag, batch, at.after.get(p)
                    )
                    for p in ps
                ],
                auth,
            )
            full: list[tuple[int, bytes]] = []  # (which of ``ps``, its tie's upper bound)
            ties: list[ByIndex] = []
            for j, first in enumerate(firsts):
                if first is None or len(first.items) < n:
                    continue
                tie_low, tie_high = equal_bounds(value_of(first.items[-1][0]))
                said = first.source.batch if first.source is not None else -1
                as_of = said if said >= 0 else batch
                after = at.after.get(ps[j])
                full.append((j, tie_high))
                ties.append(
                    ByIndex(
                        name,
                        ps[j],
                        field,
                        tie_low,
                        tie_high,
                        n,
                        False,
                        False,
                        max_lag,
                        as_of,
                        after,
                    )
                )
            heads = list(firsts)
            tied = await self.reader.by_index_many(ties, auth) if ties else []
            for (j, tie_high), more in zip(full, tied, strict=True):
                first = firsts[j]
                if first is None or more is None:
                    heads[j] = None
                    continue
                above = [item for item in first.items if item[0] >= tie_high]
                heads[j] = msgspec.structs.replace(first, items=above + more.items)
            return heads

        heads = await _per_partition(name, list(range(runtime.partitions)), at, head, "rank")
        return top_of((h.items for h in heads), n), [h.source for h in heads if h.source]

    async def internal_by_index_many(
        self, body: bytes, caller: VerifiedCaller | None = None
    ) -> bytes:
        """Another node's ``Peers.by_index_many``: each read answered as ``internal_by_index``
        would, in order, None for a 421; ``caller`` as for ``internal_multiget``."""
        try:
            request = decode_by_index_many(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed index reads: {exc}") from exc
        if len(request.reads) > MAX_INDEX_READS:
            raise BadRequest(f"at most {MAX_INDEX_READS} index reads per request")
        for asked in request.reads:
            _may_read(caller, asked.table)
            if not 0 <= asked.limit <= MAX_RANGE_LIMIT:
                raise BadRequest(f"limit must be between 0 and {MAX_RANGE_LIMIT}")
        here = self.reader.here
        return encode(IndexResults([await here.by_index(asked) for asked in request.reads]))

    async def internal_by_index(self, body: bytes, caller: VerifiedCaller | None = None) -> bytes:
        """Another node's ``Peers.by_index``: a page of a local replica's index, or 421;
        ``caller`` as for ``internal_multiget``."""
        try:
            request = decode_by_index(body)
        except DecodeError as exc:
            raise BadRequest(f"malformed index read: {exc}") from exc
        _may_read(caller, request.table)
        if not 0 <= request.limit <= MAX_RANGE_LIMIT:
            raise BadRequest(f"limit must be between 0 and {MAX_RANGE_LIMIT}")
        page = await self.reader.here.by_index(request)
        if page is None:
            raise NotHere(
                f"{self.node.node_id} holds no usable replica of "
                f"{request.table}[{request.partition}] indexing {request.field!r}"
            )
        return encode(page)


def rank_field(runtime: TableRuntime) -> str:
    """The field ``runtime``'s table is ranked by; a 400 saying how to rank it when none."""
    field = runtime.spec.rank_by
    if field is None:
        name = runtime.spec.name
        raise BadRequest(
            f"table {name} is not ranked: its pipeline ranks it by a numeric value field "
            f"with ctx.write_table({name!r}, ..., rank_by=FIELD)",
            table=name,
        )
    return field


def top_window(runtime: TableRuntime, start: str | None) -> bytes:
    """A top's ``window=``: the window start as keys write it (``window_time``), ``b""`` for
    none; a 400 when ``runtime``'s table is not windowed or ``start`` is no time."""
    if not start:
        return b""
    if not runtime.spec.windowed:
        name = runtime.spec.name
        raise BadRequest(
            f"table {name} is not windowed, so it has no window to rank within: its pipeline "
            "writes it with ctx.write_table(..., window=COLUMN)",
            table=name,
        )
    try:
        return window_time(start, "window").encode()
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _bounds(
    prefix: bytes, start: bytes | None, end: bytes | None, cursor: str | None, reverse: bool
) -> tuple[bytes | None, bytes | None]:
    """A page's [start, end): keys starting with ``prefix`` within the bounds asked, past
    the ``cursor`` (the last key of the page before: after it ascending, below it
    descending)."""
    if prefix:
        start = max(start or prefix, prefix)
        upper = prefix_end(prefix)
        end = upper if end is None else (min(end, upper) if upper else end)
    if cursor:
        last = decode_cursor(cursor)
        if reverse:
            end = last if end is None else min(end, last)
        else:
            after = last + b"\x00"
            start = after if start is None else max(start, after)
    return start, end


def _window_range(
    runtime: TableRuntime, key: str, start: str | None, end: str | None
) -> tuple[bytes, bytes | None, bytes | None]:
    """The prefix of ``key``'s windows and the keys of those starting in [start, end); a
    400 when the table is not windowed, the key empty or a time no time."""
    if not runtime.spec.windowed:
        raise BadRequest(
            f"table {runtime.spec.name} is not windowed: its pipeline writes it with "
            "ctx.write_table(..., window=COLUMN) for windows by key"
        )
    if not key:
        raise BadRequest("give the key whose windows to read")
    prefix = f"{key}{window_sep(runtime)}"
    try:
        low = prefix + window_time(start, "from") if start else None
        high = prefix + window_time(end, "to") if end else None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return prefix.encode(), low.encode() if low else None, high.encode() if high else None


def window_page(runtime: TableRuntime, width: int) -> WindowPage:
    """How a page of one key's windows is made: ``width``, the bytes of the key and the
    separator before each window's times."""
    return WindowPage(width, window_sep(runtime), runtime.spec.format == "raw")


def window_sep(runtime: TableRuntime) -> str:
    """The separator before a windowed key's start and end."""
    return runtime.spec.key_separator or "|"


def is_descending(order: str | None) -> bool:
    """The ``order`` of a range: ``asc`` (the default) or ``desc``; a 400 for anything else."""
    if not order or order == "asc":
        return False
    if order == "desc":
        return True
    raise BadRequest(f"order must be asc or desc, got {order!r}")


def _may_read(caller: VerifiedCaller | None, table: str) -> None:
    # ``table`` is a version's internal name (``NAME@v2``): scopes name the table itself
    if caller is not None and not caller.grants.may_read(public_name(table)):
        raise InsufficientScope(read_scope(public_name(table)))


async def _per_partition(
    table: str,
    partitions: list[int],
    at: ReadAt,
    read: Callable[[list[int], int | None], Awaitable[list[_Page | None]]],
    what: str = "scan",
) -> list[_Page]:
    """Each of ``partitions`` read once (``read(partitions, batch)``: each one's page, in
    order, None where no replica answered); with ``at.consistent``, as of one batch
    (``api.consistency``). ``Unavailable`` when a partition has no replica that answers."""
    first = LATEST if at.consistent else None
    pages = await read(partitions, first)
    nobody = [p for p, page in zip(partitions, pages, strict=True) if page is None]
    if nobody and at.after and at.wait_ms:
        caught_up: dict[int, _Page | None] = {}

        async def ask(behind: list[int]) -> list[int]:
            got = await read(behind, first)
            caught_up.update((p, page) for p, page in zip(behind, got, strict=True) if page)
            return [p for p, page in zip(behind, got, strict=True) if page is None]

        await consistency.waited(at, nobody, ask)
        pages = [caught_up.get(p, page) for p, page in zip(partitions, pages, strict=True)]
        nobody = [p for p, page in zip(partitions, pages, strict=True) if page is None]
    if nobody:
        if any(p in at.after for p in nobody):
            raise consistency.behind(table, nobody, at)
        raise Unavailable(f"no replica of {table}[{nobody[0]}] could {what}", partition=nobody[0])
    answered = [_sourced(page, p) for p, page in zip(partitions, pages, strict=True) if page]
    batch = consistency.pinned(at, (page.source for page in answered if page.source))
    again = consistency.redo((page.source for page in answered if page.source), batch)
    if batch is None or not again:
        return answered
    as_of = batch
    now: dict[int, _Page] = {}

    async def ask_as_of(some: list[int]) -> list[int]:
        redone = await read(some, as_of)
        # An answer as of another batch (a node of an older kiq ignores ``batch``) is none.
        now.update(
            (p, page)
            for p, page in zip(some, redone, strict=True)
            if page is not None and page.source is not None and page.source.batch == as_of
        )
        return [p for p in some if p not in now]

    refused = await consistency.asked_again(
        await ask_as_of(again), ask_as_of, PIN_WAIT_S if at.batch is not None else 0.0
    )
    if refused:
        raise consistency.unavailable(table, refused, as_of)
    return [now.get(page.source.partition, page) if page.source else page for page in answered]


def per_partition(limit: int, partitions: int) -> int:
    """How many rows a page of ``limit`` asks each of ``partitions`` for: its share of
    the page and a margin, not the whole page (keys spread over the partitions by hash,
    so each holds about ``limit / partitions`` of any range; asking each for ``limit``
    read ``partitions`` times the page to answer it)."""
    if partitions <= 1:
        return limit
    return min(limit, -(-limit * 5 // (4 * partitions)) + 16)


def merge_pages(
    pages: list[list[Row]], open_: list[bool], limit: int, reverse: bool
) -> tuple[list[Row], bool]:
    """Partition pages merged into key order: at most ``limit`` rows, and whether there may
    be more. A partition still ``open_`` may hold keys past its page's last, so the merge
    ends at the first such last key (the lowest, ascending): every row up to it is in the
    pages, and the next page starts after it."""
    if len(pages) == 1:  # one partition's rows (a key's windows) are in order already
        (rows,) = pages
        return rows[:limit], (open_[0] and bool(rows)) or len(rows) > limit
    rows = sorted(chain.from_iterable(pages), key=_key_of, reverse=reverse)
    ends = [page[-1][0] for page, more in zip(pages, open_, strict=True) if more and page]
    more = bool(ends) or len(rows) > limit
    if ends:
        if reverse:
            low = max(ends)
            rows = list(takewhile(lambda row: row[0] >= low, rows))
        else:
            high = min(ends)
            rows = list(takewhile(lambda row: row[0] <= high, rows))
    return rows[:limit], more


async def filled(
    partitions: list[int],
    pages: Sequence[_Page],
    share: int,
    limit: int,
    reverse: bool,
    past: Callable[[list[int], int, dict[int, bytes]], Awaitable[list[_Page]]],
) -> tuple[list[Any], bool]:
    """``pages`` (each partition's first, up to ``share`` rows) merged into up to ``limit``
    rows, and whether there may be more: while the merge is short, the partitions that may
    hold more are read again past their last row (``past(partitions, need, last rows)``),
    at most ``MAX_SCAN_ROUNDS`` times."""
    rows = {p: list(page.items) for p, page in zip(partitions, pages, strict=True)}
    open_ = {p: len(page.items) >= share for p, page in zip(partitions, pages, strict=True)}
    merged, more = merge_pages(list(rows.values()), list(open_.values()), limit, reverse)
    for _ in range(MAX_SCAN_ROUNDS):
        again = [p for p, may in open_.items() if may]
        if len(merged) >= limit or not again:
            break
        need = limit - len(merged)
        got = await past(again, need, {p: rows[p][-1][0] for p in again})
        for p, page in zip(again, got, strict=True):
            rows[p].extend(page.items)
            open_[p] = len(page.items) >= need
        merged, more = merge_pages(list(rows.values()), list(open_.values()), limit, reverse)
    return merged, more


def _key_of(row: tuple[bytes, ...]) -> bytes:
    return row[0]


def _each(
    read: Callable[[int, int | None], Awaitable[_Page | None]],
) -> Callable[[list[int], int | None], Awaitable[list[_Page | None]]]:
    """``_per_partition``'s ``read`` from a read of one partition: each asked concurrently."""

    async def every(partitions: list[int], batch: int | None) -> list[_Page | None]:
        if len(partitions) == 1:  # a key's windows, a prefix's partition: no task for it
            return [await read(partitions[0], batch)]
        return list(await asyncio.gather(*(read(p, batch) for p in partitions)))

    return every


def _sourced(page: _Page, partition: int) -> _Page:
    """``page`` with its source said (an older node did not say)."""
    if page.source is None:
        return msgspec.structs.replace(page, source=Source(partition))
    return page


Answer = tuple[bytes, dict[str, str]]


def _answer(
    runtime: TableRuntime, body: dict[str, Any], sources: list[Source], at: ReadAt
) -> Answer:
    """A JSON answer and its headers: the position it read, and the batch it reflects
    (also in the body, ``batch``) when it was asked as of one."""
    batch = consistency.chosen(sources) if at.consistent else None
    if at.consistent:
        body["batch"] = batch
    return orjson.dumps(body), consistency.headers(runtime.spec.name, sources, batch)

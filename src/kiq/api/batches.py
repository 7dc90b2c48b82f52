"""Multi-key reads and byte-ordered scans, spread over the partitions' replicas.

POST /v1/tables/{table}/multiget groups keys by partition and asks each owner
once; GET /v1/tables/{table}/range asks every partition it may touch (one, when
the prefix fixes the partition) and merges the answers in key order, ascending or
(``order=desc``) descending. The replica reader (``routing/reader.py``) reads each
partition from its best replica, the next when one cannot answer, and says which
replica answered (``Source``: what ``kiq.Tables`` tells of staleness). Values stay
the stored bytes until the response is rendered.

Another node's ``Peers.multiget`` and ``Peers.scan`` are answered by
``internal_multiget`` and ``internal_scan``, from local replicas only.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import orjson

from kiq.api.errors import (
    BadRequest,
    InsufficientScope,
    NotHere,
    TooLarge,
    Unavailable,
    UnknownTable,
)
from kiq.api.params import check_key, decode_cursor, encode_cursor, int_param, prefix_end
from kiq.node import NodeView
from kiq.routing import Item, ReplicaReader, Source
from kiq.routing.wire import (
    DecodeError,
    MultigetResult,
    ScanResult,
    decode_multiget,
    decode_scan,
    encode,
)
from kiq.security import Principal, read_scope
from kiq.tables import TableRuntime

MAX_RANGE_LIMIT = 1000


def value_json(runtime: TableRuntime, value: bytes) -> Any:
    """A stored value inside a JSON response: embedded as is, or base64 for raw tables."""
    if runtime.spec.format == "raw":
        return base64.b64encode(value).decode()
    return orjson.Fragment(value)


class Batches:
    def __init__(self, node: NodeView, reader: ReplicaReader, max_keys: int = 10_000) -> None:
        self.node = node
        self.reader = reader  # the node's one ReplicaReader (shared with Lookups)
        self.max_keys = max_keys  # per public multiget: [limits] max_multiget_keys

    def _table(self, name: str) -> TableRuntime:
        runtime = self.node.tables.get(name)
        if runtime is None:
            raise UnknownTable(f"no table named {name!r}", table=name)
        return runtime

    # -- multiget ----------------------------------------------------------------

    async def multiget(self, table: str, body: bytes, auth: str | None) -> bytes:
        runtime = self._table(table)
        try:
            keys = orjson.loads(body)["keys"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise BadRequest('body must be {"keys": ["...", ...]}') from exc
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise BadRequest('"keys" must be a list of strings')
        if len(keys) > self.max_keys:
            raise TooLarge(f"at most {self.max_keys} keys per request", count=len(keys))
        found, missing, unavailable, _ = await self.get_many(runtime, keys, auth)
        out: dict[str, Any] = {
            "found": {k: value_json(runtime, v) for k, v in found.items()},
            "missing": missing,
        }
        if unavailable:
            out["unavailable"] = unavailable
        return orjson.dumps(out)

    async def get_many(
        self,
        runtime: TableRuntime,
        keys: list[str],
        auth: str | None,
        max_lag: int | None = None,
    ) -> tuple[dict[str, bytes], list[str], list[str], list[Source]]:
        """(found: key → stored value, missing, unavailable, the replica that answered for
        each partition): one call per owner, fallbacks per partition, only replicas within
        ``max_lag`` when given."""
        by_partition: dict[int, list[bytes]] = defaultdict(list)
        for key in dict.fromkeys(keys):
            raw = key.encode()
            check_key(raw)
            by_partition[self.node.partition_of(runtime, key)].append(raw)
        values, unanswered, sources = await self.reader.get_many(
            runtime.spec.name, by_partition, auth, max_lag
        )
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

    async def internal_multiget(self, body: bytes, caller: Principal | None = None) -> bytes:
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
            answer = await here.get(request.table, p, keys, request.max_lag)
            if answer is None:
                refused.append(p)
            else:
                found.extend(answer[0])
                sources.append(answer[1])
        return encode(MultigetResult(found, refused, sources))

    # -- range ---------------------------------------------------------------------

    async def range(self, table: str, params: dict[str, str], auth: str | None) -> bytes:
        runtime = self._table(table)
        limit = int_param(params, "limit", 1, MAX_RANGE_LIMIT) or 100
        items, last_key, _ = await self.scan(
            runtime,
            prefix=params.get("prefix", "").encode(),
            start=params.get("from", "").encode() or None,
            end=params.get("to", "").encode() or None,
            cursor=params.get("cursor"),
            limit=limit,
            auth=auth,
            reverse=is_descending(params.get("order")),
        )
        out = [{"key": k.decode(), "value": value_json(runtime, v)} for k, v in items]
        next_cursor = encode_cursor(last_key) if last_key is not None else None
        return orjson.dumps({"items": out, "next_cursor": next_cursor})

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
    ) -> tuple[list[Item], bytes | None, list[Source]]:
        """Up to ``limit`` (key, stored value) in key order (descending when ``reverse``),
        the cursor key when there may be more, and the replica that answered for each
        partition read (only replicas within ``max_lag`` when given).

        The bounds mean the same in either order: keys in [start, end) that start with
        ``prefix``. The cursor is the last key of the previous page: the next page starts
        after it, ascending, or below it, descending.
        """
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
        partitions: Iterable[int] = range(runtime.partitions)
        fixed = runtime.spec.partition_key(prefix.decode()) if prefix else None
        if fixed is not None and fixed != prefix.decode():
            partitions = [self.node.partition_of(runtime, prefix.decode())]
        pages = await asyncio.gather(
            *(
                self._scan(runtime.spec.name, p, start, end, limit, auth, reverse, max_lag)
                for p in partitions
            )
        )
        merged = list(
            heapq.merge(*(page.items for page in pages), key=lambda item: item[0], reverse=reverse)
        )
        more = len(merged) > limit or any(len(page.items) >= limit for page in pages)
        merged = merged[:limit]
        sources = [page.source for page in pages if page.source is not None]
        return merged, (merged[-1][0] if more and merged else None), sources

    async def _scan(
        self,
        table: str,
        partition: int,
        start: bytes | None,
        end: bytes | None,
        limit: int,
        auth: str | None,
        reverse: bool,
        max_lag: int | None,
    ) -> ScanResult:
        page = await self.reader.scan(table, partition, start, end, limit, auth, reverse, max_lag)
        if page is None:
            raise Unavailable(f"no replica of {table}[{partition}] could scan", partition=partition)
        if page.source is None:  # an older node that did not say
            return ScanResult(page.items, Source(partition), reverse)
        return page

    async def internal_scan(self, body: bytes, caller: Principal | None = None) -> bytes:
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
        page = await self.reader.here.scan(
            table,
            partition,
            request.start,
            request.end,
            request.limit,
            request.reverse,
            request.max_lag,
        )
        if page is None:
            raise NotHere(f"{self.node.node_id} holds no usable replica of {table}[{partition}]")
        return encode(page)


def is_descending(order: str | None) -> bool:
    """The ``order`` of a range: ``asc`` (the default) or ``desc``; a 400 for anything else."""
    if not order or order == "asc":
        return False
    if order == "desc":
        return True
    raise BadRequest(f"order must be asc or desc, got {order!r}")


def _may_read(caller: Principal | None, table: str) -> None:
    if caller is not None and not caller.grants.may_read(table):
        raise InsufficientScope(read_scope(table))

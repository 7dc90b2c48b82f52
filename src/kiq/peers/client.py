"""Every call one node makes to another, as a typed method of ``Peers``.

One wire format (the msgpack records of ``wire.py``), one timeout (the node's forward
timeout, stretched by as long as a lookup may wait for ``min_offset``), and one sender
(``sender.py``), which owns the transport (the lookup channel per peer, ``channel.py``,
or the pooled keep-alive HTTP/1.1 of ``pool.py``, over TLS to ``https://`` peers with
the ``ssl_context`` given), the membership proof a peer gives before it is sent anything
(with a cluster key) and the seal on each request and each answer.

A peer that gives no usable answer raises ``PeerError`` (lookups: a ``FAILED``
result), so the caller asks the next replica. A forwarded lookup runs down one line,
each stage built with the next and knowing nothing of those before it:
``Peers.forward`` → ``Hedger`` (its race over the partition's replicas, ``hedging.py``)
→ ``LookupBatcher`` (one request per target and tick, ``batcher.py``) → ``Sender``
(``sender.py``). The answers come back through the race (``LookupRace.deliver``).
A peer the router comes to avoid for not answering is probed (``probes.py``) until
it answers again.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Protocol

from kiq.metrics import HedgeStats
from kiq.peers.batcher import MAX_BATCH, MAX_IN_FLIGHT, LookupBatcher
from kiq.peers.channel import Channels
from kiq.peers.errors import PeerError
from kiq.peers.hedging import HedgePolicy, Hedger, LookupRace
from kiq.peers.pool import ConnectionPool
from kiq.peers.probes import Probes
from kiq.peers.sender import Sender, Transport, decoded
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    INTERNAL_BY_INDEX_MANY,
    INTERNAL_CHANGES,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    INTERNAL_TOP,
    INTERNAL_TOP_MANY,
    NOT_COUNTED,
    ByIndex,
    ByIndexMany,
    Changes,
    ChangesResult,
    IndexResult,
    Lookup,
    Multiget,
    MultigetResult,
    NodeStatus,
    Scan,
    ScanResult,
    Top,
    TopMany,
    decode_changes_result,
    decode_index_result,
    decode_index_results,
    decode_multiget_result,
    decode_node_status,
    decode_scan_result,
    decode_top_results,
    encode,
)
from kiq.security import ClusterKey


class PeerHealth(Protocol):
    """What the client tells of each peer it calls, and asks before probing one: the
    router's record (``kiq.routing.Router``), which orders the replicas by it."""

    def failed(self, url: str) -> None: ...

    def succeeded(self, url: str) -> None: ...

    def unanswered(self, url: str) -> bool: ...

    def suspect(self, url: str) -> bool: ...


class Peers:
    """The client side of every node-to-node call."""

    def __init__(
        self,
        node_id: str,
        router: PeerHealth,
        timeout_ms: int,
        cluster: ClusterKey | None = None,
        connect_timeout_s: float = 0.5,
        max_batch: int = MAX_BATCH,
        max_in_flight: int = MAX_IN_FLIGHT,
        transport: Transport | None = None,
        hedging: HedgePolicy | None = None,
        hedge_stats: HedgeStats | None = None,
        ssl_context: ssl.SSLContext | None = None,
        channels: bool = True,
    ) -> None:
        """``channels``: lookup batches over a channel per peer (when no ``transport`` is
        given); False: each batch an HTTP request."""
        pool: Transport = transport or ConnectionPool(connect_timeout_s, ssl_context)
        lookup_channels = None
        if channels and transport is None:
            lookup_channels = Channels(connect_timeout_s, ssl_context)
        self.hedge_stats = hedge_stats or HedgeStats()
        # The line a forwarded lookup runs down, built from its end: each stage is given
        # the next, and none is given one before it.
        self._sender = Sender(node_id, router, timeout_ms / 1000, cluster, pool, lookup_channels)
        self._probes = Probes(router, self._sender, self.hedge_stats)
        self._batcher = LookupBatcher(self._sender, max_batch, max_in_flight)
        self._hedger = Hedger(
            self._batcher, hedging or HedgePolicy(), self.hedge_stats, self._probes
        )

    def forward(
        self,
        targets: list[str],
        start: int,
        table: str,
        key: bytes,
        max_lag: int | None,
        min_offset: int | None,
        wait_ms: int,
        caller: str | None,
    ) -> LookupRace:
        """``key`` looked up at ``targets[start]``, hedged over the remote targets after it.

        Await the race for the first found or missing answer (or the last refusal or
        failure); its ``end`` is the index where the caller goes on (``LOCAL``, or no
        more). Batched with the other lookups for each target in this loop tick. Not
        ``async`` itself: the forwarded lookup path pays for no extra coroutine.
        """
        lookup = Lookup(table, key, max_lag, min_offset, wait_ms)
        return self._hedger.race(targets, start, lookup, caller)

    async def multiget(
        self,
        target: str,
        table: str,
        keys: list[bytes],
        caller: str | None,
        max_lag: int | None = None,
        batch: int | None = None,
        after: Mapping[int, int] | None = None,
    ) -> MultigetResult:
        """The keys the target holds, from the partitions it can serve (within ``max_lag``,
        as of ``batch``, at ``after``'s offsets); ``PeerError`` else."""
        request = encode(Multiget(table, keys, max_lag, batch, dict(after or {})))
        body = await self._sender.read(target, INTERNAL_MULTIGET, request, caller, len(keys))
        return decoded(target, decode_multiget_result, body)

    async def scan(
        self,
        target: str,
        table: str,
        partition: int,
        start: bytes | None,
        end: bytes | None,
        limit: int,
        caller: str | None,
        reverse: bool = False,
        max_lag: int | None = None,
        batch: int | None = None,
        min_offset: int | None = None,
        windows: int = 0,
    ) -> ScanResult:
        """Up to ``limit`` (key, value) of the target's replica in [start, end), in key order
        (descending when ``reverse``), and which replica it was; ``windows``: made into a
        page of a key's windows there (``Scan.windows``).

        ``PeerError`` with status 421 when the target holds no usable replica of it (within
        ``max_lag``), and when it scanned forwards a scan asked in reverse (an older node).
        """
        request = encode(
            Scan(table, partition, start, end, limit, reverse, max_lag, batch, min_offset, windows)
        )
        body = await self._sender.read(target, INTERNAL_SCAN, request, caller, limit)
        page = decoded(target, decode_scan_result, body)
        if page.reverse != reverse:
            raise PeerError(target, f"{INTERNAL_SCAN}: scanned forwards; an older kiq?")
        return page

    async def top(
        self,
        target: str,
        table: str,
        partition: int,
        n: int,
        prefix: bytes,
        caller: str | None,
        max_lag: int | None = None,
        window: bytes = b"",
        batch: int | None = None,
        min_offset: int | None = None,
    ) -> ScanResult:
        """The first ``n`` (key, value) of the target's replica in its rank order (only keys
        starting with ``prefix``, of windows starting at ``window`` when given), and which
        replica it was; ``PeerError`` (421) when the target holds no usable replica of it,
        ranked, within ``max_lag``, or ranked every window when asked for one."""
        request = encode(Top(table, partition, n, prefix, max_lag, window, batch, min_offset))
        body = await self._sender.read(target, INTERNAL_TOP, request, caller, n)
        head = decoded(target, decode_scan_result, body)
        if head.window != window:
            raise PeerError(target, f"{INTERNAL_TOP}: ranked every window; an older kiq?")
        return head

    async def top_many(
        self, target: str, reads: list[Top], caller: str | None
    ) -> list[ScanResult | None]:
        """Several partitions' heads of the target's replicas in one request (``TopMany``):
        one answer per read, in order, None where the target holds no usable ranked replica
        for it or answered another window than asked (as ``top`` would refuse it).
        ``PeerError`` when no usable answer came at all: 404 from a node of an older kiq,
        which has no such path."""
        rows = sum(read.n for read in reads)
        body = await self._sender.read(
            target, INTERNAL_TOP_MANY, encode(TopMany(reads)), caller, rows
        )
        answers = decoded(target, decode_top_results, body).answers
        if len(answers) != len(reads):
            raise PeerError(target, f"{INTERNAL_TOP_MANY}: {len(answers)} answers")
        return [
            head if head is not None and head.window == asked.window else None
            for asked, head in zip(reads, answers, strict=True)
        ]

    async def by_index(
        self,
        target: str,
        asked: ByIndex,
        caller: str | None,
    ) -> IndexResult:
        """A page of the target's replica's index of ``asked.field`` (``ByIndex``), and which
        replica it was; ``PeerError`` (421) when the target holds no usable replica of it
        indexing that field (within ``max_lag``), and when its answer does not echo the
        field, the order or the count asked (an older node)."""
        request = encode(asked)
        body = await self._sender.read(target, INTERNAL_BY_INDEX, request, caller, asked.limit)
        page = decoded(target, decode_index_result, body)
        if page.field != asked.field or page.reverse != asked.reverse:
            raise PeerError(target, f"{INTERNAL_BY_INDEX}: another read was answered")
        if not _answers(asked, page):
            raise PeerError(target, f"{INTERNAL_BY_INDEX}: not counted; an older kiq?")
        return page

    async def by_index_many(
        self,
        target: str,
        reads: list[ByIndex],
        caller: str | None,
    ) -> list[IndexResult | None]:
        """Several index reads of the target's replicas in one request (``ByIndexMany``):
        one answer per read, in order, None where the target holds no usable replica for it
        or answered another read than asked (as ``by_index`` would refuse it). ``PeerError``
        when no usable answer came at all: 404 from a node of an older kiq, which has no
        such path."""
        request = encode(ByIndexMany(reads))
        rows = sum(read.limit for read in reads)
        body = await self._sender.read(target, INTERNAL_BY_INDEX_MANY, request, caller, rows)
        answers = decoded(target, decode_index_results, body).answers
        if len(answers) != len(reads):
            raise PeerError(target, f"{INTERNAL_BY_INDEX_MANY}: {len(answers)} answers")
        return [
            page if page is not None and _answers(asked, page) else None
            for asked, page in zip(reads, answers, strict=True)
        ]

    async def changes(self, target: str, asked: Changes, caller: str | None) -> ChangesResult:
        """What changed of the watched keys in the target's replica (``Changes``), waiting up
        to ``asked.wait_ms`` for a write that changes one of them; ``PeerError`` (421) when
        the target holds no usable replica of the partition."""
        body = await self._sender.call(
            target, "POST", INTERNAL_CHANGES, encode(asked), caller, asked.wait_ms / 1000
        )
        return decoded(target, decode_changes_result, body)

    async def metadata(self, target: str, caller: str | None = None) -> NodeStatus:
        """The target's own replicas: role, state, offsets, lag."""
        body = await self._sender.call(target, "GET", INTERNAL_METADATA, b"", caller)
        return decoded(target, decode_node_status, body)

    def close(self) -> None:
        """Closes the idle connections; requests still out finish on theirs."""
        self._probes.close()
        self._sender.close()

    async def proven(self, target: str, wait_s: float = 0.0) -> bool:
        """Whether ``target`` has proven it holds the cluster secret: the one test before a
        URL is named to anyone (``/v1/metadata``, a redirect). One not yet proven is
        challenged now, waited for at most ``wait_s``; a refused one is False at once.
        Without a cluster key there is nothing to prove: every member is taken at its word."""
        return await self._sender.proven(target, wait_s)


def _answers(asked: ByIndex, page: IndexResult) -> bool:
    """Whether ``page`` answers ``asked``: it echoes the field and order, counted if asked."""
    if page.field != asked.field or page.reverse != asked.reverse:
        return False
    return not asked.count or page.count != NOT_COUNTED

"""Reading a partition from its best replica: the one door every read of the API goes through.

A read (one key, some keys, a page of keys) goes to the replicas of its partition
best first: this node's own replica when it is the active one, else the router's
order (``router.py``: the owner, then the standbys, with this node's replica where
the view puts it, and only within the caller's ``max_lag``). A local read goes to
``LocalReplicas`` (``local.py``: the wait for a store being reopened, the wait for
``min_offset``); a remote one goes through ``Peers``, a lookup raced over the
remote replicas that follow (``hedging.py``). A replica that cannot answer hands
the read to the next: a peer down, refusing or slow, a local store closed under
the read because its partition was revoked (``StoreClosedError``).

What became of a lookup is an ``Outcome`` (``wire.py``); only the API turns one into
an HTTP status (``api/errors.py``). Another node's request is answered from
``here`` alone, never forwarded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from kiq.cluster import ClusterView
from kiq.metrics import NodeMetrics
from kiq.peers.client import Peers
from kiq.peers.errors import PeerError
from kiq.peers.wire import (
    ByIndex,
    Changes,
    ChangesResult,
    IndexResult,
    LookupResult,
    Outcome,
    ScanResult,
    Source,
    Top,
)
from kiq.replicas import ReplicaState
from kiq.replicas.replica import ReadOnlyReplica
from kiq.routing.local import LocalReplicas
from kiq.routing.pages import Render
from kiq.routing.router import LOCAL, Router, servable
from kiq.settings import LimitsSettings

log = logging.getLogger(__name__)
_Page = TypeVar("_Page", ScanResult, IndexResult)
_Read = TypeVar("_Read", Top, ByIndex)  # a partition read ``_many`` spreads

FOUND, MISSING, MOVED, FAILED = Outcome.FOUND, Outcome.MISSING, Outcome.MOVED, Outcome.FAILED
_ACTIVE = ReplicaState.ACTIVE
# A lookup whose local replica was revoked under it, with no other replica to ask, waits
# this long for the view the rebalance brings, and asks its replicas once more.
VIEW_WAIT_S = 1.0
VIEW_POLL_S = 0.02


class Holdings(Protocol):
    """What the reader needs of its node (``kiq.node.NodeView`` is one)."""

    @property
    def node_id(self) -> str: ...

    @property
    def replicas(self) -> Mapping[tuple[str, int], ReadOnlyReplica]:
        """The node's live replicas by (table, partition)."""
        ...

    @property
    def view(self) -> ClusterView:
        """The current cluster view."""
        ...

    @property
    def metrics(self) -> NodeMetrics: ...


class ReplicaReader:
    """Reads keys and pages of a partition from the best replica that can answer.

    ``caller`` (the statement of the caller this node verified) goes to the peers a
    read is forwarded to; ``parker`` is whom a wait for ``min_offset`` counts against
    (``limits``: the caps on those waits).
    """

    def __init__(
        self,
        node: Holdings,
        router: Router,
        peers: Peers,
        limits: LimitsSettings | None = None,
    ) -> None:
        self.here = LocalReplicas(node.node_id, node.replicas, limits)
        node.metrics.window_pages = self.here.pages.figures
        self._node = node
        self._replicas = node.replicas
        self._router = router
        self._peers = peers
        self._forwards = node.metrics.forwards

    def elsewhere(self, table: str, partition: int, max_lag: int | None = None) -> str | None:
        """The URL of the best replica when it is another node's; None when it is this
        node's own (or none is known)."""
        local = self._replicas.get((table, partition))
        if _answers_first(local, max_lag):
            return None
        targets = self._router.targets(self._node.view, table, partition, local, max_lag)
        return targets[0] if targets and targets[0] != LOCAL else None

    async def lookup(
        self,
        table: str,
        partition: int,
        key: bytes,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
        caller: str | None = None,
        parker: str | None = None,
    ) -> LookupResult:
        """``key`` from the best replica that answers: FOUND or MISSING.

        Else why not: UNAVAILABLE or BUSY from this node's own replica (the wait for
        ``min_offset`` was spent there, or refused), FORBIDDEN from a peer (it applies
        the caller's grants too), NO_REPLICA once every replica was asked.
        """
        revoked = "this node's replica was revoked during the request"
        last = "no replica of this partition is known"
        moved = False  # this node's replica was revoked under the request
        local = self._replicas.get((table, partition))
        if local is not None and _answers_first(local, max_lag):
            # ``_targets``' order, the router asked only when the local replica cannot answer
            result = await self.here.lookup_in(local, key, min_offset, wait_ms, parker)
            if result.outcome is not MOVED:
                return result
            last, moved = revoked, True
            local = None
        view = self._node.view
        targets = self._router.targets(view, table, partition, local, max_lag)
        for retry in (False, True):
            i = 0
            while i < len(targets):
                if targets[i] == LOCAL:
                    i += 1
                    result = await self.here.lookup(
                        table, partition, key, max_lag, min_offset, wait_ms, parker
                    )
                    if result.outcome is not MOVED:
                        return result
                    last, moved = revoked, True
                    continue
                race = self._peers.forward(
                    targets, i, table, key, max_lag, min_offset, wait_ms, caller
                )
                result = await race
                i = race.end
                outcome = result.outcome
                if outcome is FOUND or outcome is MISSING:
                    self._forwards.ok += 1
                    return result
                if outcome is FAILED:
                    self._forwards.failed += 1
                    # The peer's URL and the OS's words stay in the log, out of the answer.
                    log.info(
                        "lookup forward failed table=%s partition=%d error=%s",
                        table,
                        partition,
                        result.reason,
                    )
                    last = "no other replica answered in time"
                elif outcome is Outcome.FORBIDDEN:
                    return result
                else:  # this replica cannot answer (yet); the next one may
                    last = f"a replica could not answer ({outcome.name.lower()}): {result.reason}"
            if retry or not moved:
                break
            # The partition moved under the request and no other replica answered: the
            # view that says where it went is due (a rebalance is under way). Ask again.
            moved_to = await self._next_view(view)
            if moved_to is None:
                break
            view = moved_to
            targets = self._router.targets(view, table, partition, None, max_lag)
        return LookupResult(Outcome.NO_REPLICA, partition, reason=last)

    async def _next_view(self, seen: ClusterView) -> ClusterView | None:
        """The node's next cluster view after ``seen``, within ``VIEW_WAIT_S`` (else None)."""
        deadline = asyncio.get_running_loop().time() + VIEW_WAIT_S
        while True:
            view = self._node.view
            if view.version != seen.version:
                return view
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(VIEW_POLL_S)

    async def get_many(
        self,
        table: str,
        keys: Mapping[int, list[bytes]],
        caller: str | None,
        max_lag: int | None = None,
        batch: int | None = None,
        after: Mapping[int, int] | None = None,
    ) -> tuple[dict[bytes, bytes], list[int], list[Source]]:
        """The values of ``keys`` (by partition) found, the partitions no replica could
        answer for (within ``max_lag``, as of ``batch``, at ``after``'s offset of the
        partition), and the replica that answered for each other one. Each round asks
        every target once for all its partitions; a partition it could not answer for
        goes to its next replica in the next round."""
        after = after or {}
        found: dict[bytes, bytes] = {}
        unanswered: list[int] = []
        sources: list[Source] = []
        pending = {p: self._targets(table, p, max_lag) for p in keys}
        while pending:
            rounds: dict[str, list[int]] = defaultdict(list)
            for p, targets in list(pending.items()):
                if targets:
                    rounds[targets.pop(0)].append(p)
                else:
                    unanswered.append(p)
                    del pending[p]
            answers = await asyncio.gather(
                *(
                    self._get_from(t, table, parts, keys, caller, max_lag, batch, after)
                    for t, parts in rounds.items()
                )
            )
            for parts, (got, refused, said) in zip(rounds.values(), answers, strict=True):
                for p in parts:
                    if p in refused:
                        continue
                    del pending[p]
                    sources.append(said.get(p) or Source(p))
                    for key in keys[p]:  # what was asked, whatever else came
                        value = got.get(key)
                        if value is not None:
                            found[key] = value
        return found, unanswered, sources

    async def scan(
        self,
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
        render: Render | None = None,
    ) -> ScanResult | None:
        """Up to ``limit`` (key, value) of the partition in [start, end) in key order
        (descending when ``reverse``), from the best replica that answers (within
        ``max_lag``, as of ``batch``, at ``min_offset``), and which one it was; None when
        none could. With ``render``, made into its page where the rows are (a node of an
        older kiq answers the rows: ``ScanResult.page`` is then empty)."""
        return await self._first_answer(
            "scan",
            table,
            partition,
            max_lag,
            lambda: self.here.scan(
                table, partition, start, end, limit, reverse, max_lag, batch, min_offset, render
            ),
            lambda url: self._peers.scan(
                url,
                table,
                partition,
                start,
                end,
                limit,
                caller,
                reverse,
                max_lag,
                batch,
                min_offset,
                render.width if render is not None else 0,
            ),
        )

    async def top(
        self,
        table: str,
        partition: int,
        n: int,
        prefix: bytes,
        caller: str | None,
        max_lag: int | None = None,
        window: bytes = b"",
        batch: int | None = None,
        min_offset: int | None = None,
    ) -> ScanResult | None:
        """The first ``n`` (key, value) of the partition in its rank order (only keys starting
        with ``prefix``, of windows starting at ``window`` when given), from the best replica
        that answers (within ``max_lag``), and which one it was; None when none could.
        Replicas asked in ``scan``'s order."""
        return await self._first_answer(
            "top",
            table,
            partition,
            max_lag,
            lambda: self.here.top(table, partition, n, prefix, max_lag, window, batch, min_offset),
            lambda url: self._peers.top(
                url, table, partition, n, prefix, caller, max_lag, window, batch, min_offset
            ),
        )

    async def by_index(self, asked: ByIndex, caller: str | None) -> IndexResult | None:
        """A page of the partition's index of ``asked.field`` (``ByIndex``), from the best
        replica that answers (one that indexes the field, within ``max_lag``), asked in
        ``scan``'s order; None when none could."""
        return await self._first_answer(
            "index read",
            asked.table,
            asked.partition,
            asked.max_lag,
            lambda: self.here.by_index(asked),
            lambda url: self._peers.by_index(url, asked, caller),
        )

    async def by_index_many(
        self, reads: list[ByIndex], caller: str | None
    ) -> list[IndexResult | None]:
        """``by_index`` of each of ``reads``, in order, each answer the one it would give, in
        fewer requests (``_many``: ``ByIndexMany``)."""
        return await self._many(
            "index read",
            reads,
            self.here.by_index,
            lambda url, read: self._peers.by_index(url, read, caller),
            lambda url, some: self._peers.by_index_many(url, some, caller),
        )

    async def top_many(self, reads: list[Top], caller: str | None) -> list[ScanResult | None]:
        """``top`` of each of ``reads`` (one per partition of a top), in order, each answer the
        one it would give, in fewer requests (``_many``: ``TopMany``)."""
        return await self._many(
            "top",
            reads,
            self._top_here,
            lambda url, read: self._peers.top(
                url,
                read.table,
                read.partition,
                read.n,
                read.prefix,
                caller,
                read.max_lag,
                read.window,
                read.batch,
                read.min_offset,
            ),
            lambda url, some: self._peers.top_many(url, some, caller),
        )

    def _top_here(self, read: Top) -> Awaitable[ScanResult | None]:
        return self.here.top(
            read.table,
            read.partition,
            read.n,
            read.prefix,
            read.max_lag,
            read.window,
            read.batch,
            read.min_offset,
        )

    async def _many(
        self,
        what: str,
        reads: Sequence[_Read],
        here: Callable[[_Read], Awaitable[_Page | None]],
        one: Callable[[str, _Read], Awaitable[_Page]],
        many: Callable[[str, list[_Read]], Awaitable[list[_Page | None]]],
    ) -> list[_Page | None]:
        """Partition reads of one query (``what``), in order, each answer the one its own
        read would give, in fewer requests: the reads whose best replica is this node's are
        read ``here``, and each peer is asked once for all the reads it is the first choice
        for (``many``; a lone read by ``one``), concurrently. A read it could not answer,
        or whose peer failed, goes on to its next replicas as its own read would; every
        read, to the same peer too, when the peer has no such path (404: an older kiq)."""
        answers: list[_Page | None] = [None] * len(reads)
        targets = [self._targets(r.table, r.partition, r.max_lag) for r in reads]
        firsts: dict[str, list[int]] = defaultdict(list)
        for i, ordered in enumerate(targets):
            firsts[ordered[0] if ordered else ""].append(i)
        later: dict[int, list[str]] = {i: [] for i in firsts.pop("", [])}

        async def ask(target: str, some: list[int]) -> None:
            if target == LOCAL:
                for i in some:
                    answers[i] = await here(reads[i])
            elif len(some) == 1:
                later[some[0]] = targets[some[0]]  # as its own read, from its first replica
                return
            else:
                try:
                    got = await many(target, [reads[i] for i in some])
                except (PeerError, TimeoutError) as exc:
                    log.warning("%ss failed table=%s error=%s", what, reads[some[0]].table, exc)
                    if isinstance(exc, PeerError) and exc.status == 404:
                        later.update((i, targets[i]) for i in some)  # each read on its own
                        return
                    got = [None] * len(some)
                for i, page in zip(some, got, strict=True):
                    answers[i] = page
            later.update((i, targets[i][1:]) for i in some if answers[i] is None)

        await asyncio.gather(*(ask(target, some) for target, some in firsts.items()))
        if later:

            def alone(read: _Read, rest: list[str]) -> Awaitable[_Page | None]:
                return self._first_answer(
                    what,
                    read.table,
                    read.partition,
                    read.max_lag,
                    lambda: here(read),
                    lambda url: one(url, read),
                    rest,
                )

            pages = await asyncio.gather(*(alone(reads[i], rest) for i, rest in later.items()))
            for i, page in zip(later, pages, strict=True):
                answers[i] = page
        return answers

    async def changes(self, asked: Changes, caller: str | None) -> ChangesResult | None:
        """A relayed watch's next answer (``Changes``), from the best replica that answers,
        asked in ``scan``'s order; None when none could."""
        for target in self._targets(asked.table, asked.partition):
            if target == LOCAL:
                answer = await self.here.changes(asked)
                if answer is not None:
                    return answer
                continue
            try:
                return await self._peers.changes(target, asked, caller)
            except PeerError as exc:
                log.info(
                    "watch relay failed table=%s partition=%d error=%s",
                    asked.table,
                    asked.partition,
                    exc,
                )
        return None

    async def _first_answer(
        self,
        what: str,
        table: str,
        partition: int,
        max_lag: int | None,
        here: Callable[[], Awaitable[_Page | None]],
        there: Callable[[str], Awaitable[_Page]],
        targets: list[str] | None = None,
    ) -> _Page | None:
        """A partition read (``what``: scan, top, index read) from the best replica that
        answers: this node's own (``here``; None when it cannot), else each member in turn
        (``there``); only ``targets``, in their order, when given."""
        if targets is None:
            targets = self._targets(table, partition, max_lag)
        for target in targets:
            if target == LOCAL:
                page = await here()
                if page is not None:
                    return page
                continue
            try:
                return await there(target)
            except PeerError as exc:
                log.warning("%s failed table=%s partition=%d error=%s", what, table, partition, exc)
        log.warning(
            "%s unavailable table=%s partition=%d replicas=%s",
            what,
            table,
            partition,
            self._node.view.of(table, partition),
        )
        return None

    def _targets(self, table: str, partition: int, max_lag: int | None = None) -> list[str]:
        """``LOCAL`` or member URLs, best first: a local active replica, then the router's."""
        local = self._replicas.get((table, partition))
        view = self._node.view
        if _answers_first(local, max_lag):
            return [LOCAL, *self._router.targets(view, table, partition, None, max_lag)]
        return self._router.targets(view, table, partition, local, max_lag)

    async def _get_from(
        self,
        target: str,
        table: str,
        partitions: list[int],
        keys: Mapping[int, list[bytes]],
        caller: str | None,
        max_lag: int | None,
        batch: int | None,
        after: Mapping[int, int],
    ) -> tuple[Mapping[bytes, bytes], set[int], dict[int, Source]]:
        """(key → value found, the partitions the target could not answer for, the replica
        that answered for each other one, when the target said)."""
        if target == LOCAL:
            got: dict[bytes, bytes] = {}
            refused: set[int] = set()
            sources: dict[int, Source] = {}
            for p in partitions:
                answer = await self.here.get(table, p, keys[p], max_lag, batch, after.get(p))
                if answer is None:
                    refused.add(p)
                else:
                    got.update(answer[0])
                    sources[p] = answer[1]
            return got, refused, sources
        asked = [k for p in partitions for k in keys[p]]
        try:
            bounds = {p: after[p] for p in partitions if p in after}
            result = await self._peers.multiget(
                target, table, asked, caller, max_lag, batch, bounds
            )
        except PeerError as exc:
            log.debug("multiget failed table=%s error=%s", table, exc)
            return {}, set(partitions), {}
        return dict(result.found), set(result.refused), {s.partition: s for s in result.sources}


def _answers_first(local: ReadOnlyReplica | None, max_lag: int | None) -> bool:
    """Whether this node's replica is the best of all: active, and within ``max_lag``."""
    if local is None or local.state is not _ACTIVE:
        return False
    return max_lag is None or servable(local, max_lag)

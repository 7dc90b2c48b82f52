"""Every call one node makes to another, as a typed method of ``Peers``.

One transport (``ConnectionPool``: pooled keep-alive HTTP/1.1, over TLS to
``https://`` peers with the ``ssl_context`` given), one wire format
(the msgpack records of ``wire.py``), one timeout (the node's forward timeout,
stretched by as long as a lookup may wait for ``min_offset``), and one set of
request headers, built in ``_headers``: ``X-Kiq-Forwarded`` with this node's id,
the statement of the caller this node verified (``X-Kiq-Principal``: never the
caller's token), and, with a ``cluster`` key, the credential signing the request
for that one peer. The router hears of every peer that could not be reached, and
of every one that answered.

With a cluster key a peer is sent nothing until it has proven it holds the secret
(``POST /v1/internal/hello``: a challenge it answers sealed), and no answer of
its is believed unless sealed for the request it answers. A group member that
cannot prove it is treated as a dead peer (its partitions are read from standbys)
and named once in the log; it is asked again at most every ``PROOF_RETRY_S``.

A peer that gives no usable answer raises ``PeerError`` (lookups: a ``FAILED``
result), so the caller asks the next replica. A forwarded lookup goes
``forward`` → ``Hedger`` (its race over the partition's replicas, ``hedging.py``)
→ ``LookupBatcher`` (one request per target and tick, ``batcher.py``) →
``_send_lookups`` here, which sends the batch over the peer's channel (one WebSocket
carrying every batch, ``channel.py``: signed, sealed and failed as a request is) or,
to a peer that serves none, as a ``POST /v1/internal/lookups``. A peer the router comes
to avoid for not answering is probed (``GET /v1/health/live``) until it answers again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from kiq.metrics import HedgeStats
from kiq.peers.batcher import MAX_BATCH, MAX_IN_FLIGHT, LookupBatcher
from kiq.peers.channel import ChannelRefused, Channels
from kiq.peers.errors import PeerError
from kiq.peers.hedging import HedgePolicy, Hedger, LookupRace
from kiq.peers.pool import ConnectionPool
from kiq.peers.wire import (
    FORWARDED,
    HEALTH_LIVE,
    INTERNAL_CHANGES,
    INTERNAL_CHANNEL,
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    INTERNAL_TOP,
    MSGPACK,
    PRINCIPAL,
    Changes,
    ChangesResult,
    DecodeError,
    Lookup,
    LookupResult,
    Multiget,
    MultigetResult,
    NodeStatus,
    Scan,
    ScanResult,
    Top,
    decode_changes_result,
    decode_multiget_result,
    decode_node_status,
    decode_results,
    decode_scan_result,
    encode,
)
from kiq.security import CLUSTER_HEADER, ClusterKey, CredentialRejected

T = TypeVar("T")
log = logging.getLogger(__name__)

# A peer avoided for not answering is asked every PROBE_INTERVAL_S whether it is back.
PROBE_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 0.5
# A peer that failed to prove it holds the cluster secret is not asked again before this.
PROOF_RETRY_S = 5.0


class Transport(Protocol):
    """Carries one request to a peer: ``ConnectionPool``, or an in-process stand-in in tests.

    Raises ``ConnectionError`` when the peer cannot be reached or answers nothing usable.
    """

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> tuple[int, bytes]: ...

    def close(self) -> None: ...


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
        self._router = router
        self._timeout_s = timeout_ms / 1000
        self._cluster = cluster
        # Peers that proved they hold the cluster secret; those that failed, until when not
        # to ask again; proofs under way (one per peer, awaited by every request meanwhile).
        self._proven: set[str] = set()
        self._refused: dict[str, float] = {}
        self._proving: dict[str, asyncio.Task[None]] = {}
        self._pool: Transport = transport or ConnectionPool(connect_timeout_s, ssl_context)
        self._channels = (
            Channels(connect_timeout_s, ssl_context) if channels and transport is None else None
        )
        self._with_body = {FORWARDED: node_id, "content-type": MSGPACK}
        self._without_body = {FORWARDED: node_id}
        self._batcher = LookupBatcher(self._send_lookups, max_batch, max_in_flight)
        self.hedge_stats = hedge_stats or HedgeStats()
        self._hedger = Hedger(
            self._batcher.submit, hedging or HedgePolicy(), self.hedge_stats, self._unanswered
        )
        self._probes: dict[str, asyncio.Task[None]] = {}

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
    ) -> MultigetResult:
        """The keys the target holds, from the partitions it can serve (within ``max_lag``);
        ``PeerError`` else."""
        request = encode(Multiget(table, keys, max_lag))
        body = await self._call(target, "POST", INTERNAL_MULTIGET, request, caller)
        return _decoded(target, decode_multiget_result, body)

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
    ) -> ScanResult:
        """Up to ``limit`` (key, value) of the target's replica in [start, end), in key order
        (descending when ``reverse``), and which replica it was.

        ``PeerError`` with status 421 when the target holds no usable replica of it (within
        ``max_lag``), and when it scanned forwards a scan asked in reverse (an older node).
        """
        request = encode(Scan(table, partition, start, end, limit, reverse, max_lag))
        body = await self._call(target, "POST", INTERNAL_SCAN, request, caller)
        page = _decoded(target, decode_scan_result, body)
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
    ) -> ScanResult:
        """The first ``n`` (key, value) of the target's replica in its rank order (only keys
        starting with ``prefix``, of windows starting at ``window`` when given), and which
        replica it was; ``PeerError`` (421) when the target holds no usable replica of it,
        ranked, within ``max_lag``, or ranked every window when asked for one."""
        request = encode(Top(table, partition, n, prefix, max_lag, window))
        body = await self._call(target, "POST", INTERNAL_TOP, request, caller)
        head = _decoded(target, decode_scan_result, body)
        if head.window != window:
            raise PeerError(target, f"{INTERNAL_TOP}: ranked every window; an older kiq?")
        return head

    async def changes(self, target: str, asked: Changes, caller: str | None) -> ChangesResult:
        """What changed of the watched keys in the target's replica (``Changes``), waiting up
        to ``asked.wait_ms`` for anything past ``asked.through``; ``PeerError`` (421) when
        the target holds no usable replica of the partition."""
        body = await self._call(
            target, "POST", INTERNAL_CHANGES, encode(asked), caller, asked.wait_ms / 1000
        )
        return _decoded(target, decode_changes_result, body)

    async def metadata(self, target: str, caller: str | None = None) -> NodeStatus:
        """The target's own replicas: role, state, offsets, lag."""
        body = await self._call(target, "GET", INTERNAL_METADATA, b"", caller)
        return _decoded(target, decode_node_status, body)

    def close(self) -> None:
        """Closes the idle connections; requests still out finish on theirs."""
        for probe in list(self._probes.values()):
            probe.cancel()
        if self._channels is not None:
            self._channels.close()
        self._pool.close()

    # -- peers that stopped answering -------------------------------------------------

    def _unanswered(self, target: str) -> None:
        if not self._router.unanswered(target) or target in self._probes:
            return
        self.hedge_stats.suspected += 1
        probe = asyncio.get_running_loop().create_task(self._probe(target))
        self._probes[target] = probe
        probe.add_done_callback(lambda _: self._probes.pop(target, None))

    async def _probe(self, target: str) -> None:
        """Until the avoided ``target`` answers (anything: it is alive), or others hear it."""
        headers = self._without_body  # an open path: no credential to spend on it
        while self._router.suspect(target):
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.hedge_stats.probes += 1
            try:
                await self._pool.request(target, "GET", HEALTH_LIVE, b"", headers, PROBE_TIMEOUT_S)
            except ConnectionError:
                continue
            self._router.succeeded(target)

    # -- one request ----------------------------------------------------------------

    async def _send_lookups(
        self, target: str, caller: str | None, items: list[Lookup], wait_ms: int
    ) -> list[LookupResult]:
        request = encode(items)
        channels = self._channels
        if channels is not None and channels.usable(target):
            try:
                body = await self._over_channel(channels, target, request, caller, wait_ms)
            except ChannelRefused as exc:
                log.info("peer serves no channel url=%s reason=%s; HTTP meanwhile", target, exc)
            else:
                return _decoded(target, decode_results, body)
        body = await self._call(target, "POST", INTERNAL_LOOKUPS, request, caller, wait_ms / 1000)
        return _decoded(target, decode_results, body)

    async def _over_channel(
        self, channels: Channels, target: str, request: bytes, caller: str | None, wait_ms: int
    ) -> bytes:
        """``_call`` for a lookup batch, over the target's channel: the same credential,
        statement and seal as its ``POST``; ``ChannelRefused`` when the target has none."""
        cluster = self._cluster
        if cluster is not None and target not in self._proven:
            await self._prove(target, cluster)
        credential = None
        if cluster is not None:  # what its POST's X-Kiq-Cluster would be
            credential = cluster.sign(target, "POST", INTERNAL_LOOKUPS, request, caller)
        try:
            status, payload = await channels.request(
                target,
                request,
                credential or "",
                caller or "",
                lambda: self._headers(target, "GET", INTERNAL_CHANNEL, None, b"")[0],
                self._timeout_s + wait_ms / 1000,
            )
        except ConnectionError as exc:
            self._router.failed(target)
            raise PeerError(target, f"{INTERNAL_CHANNEL}: {exc}") from exc
        return self._believed(target, INTERNAL_LOOKUPS, status, payload, credential)

    async def _call(
        self,
        target: str,
        method: str,
        path: str,
        body: bytes,
        caller: str | None,
        extra_timeout_s: float = 0.0,
    ) -> bytes:
        """The body of the target's 200 answer; ``PeerError`` for anything else."""
        cluster = self._cluster
        if cluster is not None and target not in self._proven:
            await self._prove(target, cluster)
        headers, credential = self._headers(target, method, path, caller, body)
        try:
            status, payload = await self._pool.request(
                target, method, path, body, headers, self._timeout_s + extra_timeout_s
            )
        except ConnectionError as exc:
            self._router.failed(target)
            raise PeerError(target, f"{path}: {exc}") from exc
        return self._believed(target, path, status, payload, credential)

    def _believed(
        self, target: str, path: str, status: int, payload: bytes, credential: str | None
    ) -> bytes:
        """The body of a 200 answer, once its seal is checked; ``PeerError`` else."""
        self._router.succeeded(target)
        cluster = self._cluster
        if status != 200:
            raise PeerError(target, f"{path} answered {status}: {payload[:200]!r}", status)
        if cluster is not None:
            assert credential is not None
            try:
                return cluster.open(credential, payload)
            except CredentialRejected:
                self._proven.discard(target)
                self._not_a_member(target, "answered without the cluster secret's seal")
        return payload

    def _headers(
        self, target: str, method: str, path: str, caller: str | None, body: bytes
    ) -> tuple[Mapping[str, str], str | None]:
        headers = self._with_body if body else self._without_body
        if caller is None and self._cluster is None:
            return headers, None
        headers = dict(headers)
        if caller is not None:
            headers[PRINCIPAL] = caller
        credential = None
        if self._cluster is not None:
            credential = self._cluster.sign(target, method, path, body, caller)
            headers[CLUSTER_HEADER] = credential
        return headers, credential

    # -- peers proving they are members ---------------------------------------------

    async def proven(self, target: str, wait_s: float = 0.0) -> bool:
        """Whether ``target`` has proven it holds the cluster secret: the one test before a
        URL is named to anyone (``/v1/metadata``, a redirect). One not yet proven is
        challenged now, waited for at most ``wait_s``; a refused one is False at once.
        Without a cluster key there is nothing to prove: every member is taken at its word."""
        cluster = self._cluster
        if cluster is None or target in self._proven:
            return True
        if wait_s <= 0:
            return False
        try:
            await asyncio.wait_for(self._prove(target, cluster), wait_s)
        except (PeerError, TimeoutError):
            return False  # a proof still under way goes on, and counts for the next ask
        return True

    async def _prove(self, target: str, cluster: ClusterKey) -> None:
        """Returns once ``target`` has proven it holds the cluster secret; ``PeerError`` else."""
        refused_until = self._refused.get(target)
        if refused_until is not None and time.monotonic() < refused_until:
            raise PeerError(target, "has not proven it is a cluster member")
        proving = self._proving.get(target)
        if proving is None:
            # A task of its own: a request given up meanwhile (a hedge won) does not cancel it
            # under the others waiting for the same proof.
            proving = asyncio.get_running_loop().create_task(self._challenge(target, cluster))
            self._proving[target] = proving
            proving.add_done_callback(lambda done: self._proven_or_not(target, done))
        await asyncio.shield(proving)

    def _proven_or_not(self, target: str, done: asyncio.Task[None]) -> None:
        self._proving.pop(target, None)
        if not done.cancelled() and done.exception() is None:
            self._proven.add(target)
            self._refused.pop(target, None)

    async def _challenge(self, target: str, cluster: ClusterKey) -> None:
        challenge = os.urandom(16)
        headers, credential = self._headers(target, "POST", INTERNAL_HELLO, None, challenge)
        assert credential is not None
        try:
            status, payload = await self._pool.request(
                target, "POST", INTERNAL_HELLO, challenge, headers, self._timeout_s
            )
        except ConnectionError as exc:
            self._router.failed(target)
            raise PeerError(target, f"{INTERNAL_HELLO}: {exc}") from exc
        try:
            if status != 200 or cluster.open(credential, payload) != challenge:
                raise CredentialRejected("no sealed answer to the challenge")
        except CredentialRejected:
            self._not_a_member(target, f"answered the challenge with {status}, unsealed")

    def _not_a_member(self, target: str, why: str) -> None:
        """A peer without the cluster secret: like a dead one, asked again only later."""
        if target not in self._refused:
            log.error(
                "peer refused: not proven a cluster member url=%s reason=%s; its partitions "
                "are read from their other replicas (check --cluster-secret-file on it, or who "
                "joined the serving group)",
                target,
                why,
            )
        self._refused[target] = time.monotonic() + PROOF_RETRY_S
        self._router.failed(target)
        raise PeerError(target, "has not proven it is a cluster member")


def _decoded(target: str, decode: Callable[[bytes], T], body: bytes) -> T:
    try:
        return decode(body)
    except DecodeError as exc:
        raise PeerError(target, f"sent a malformed answer: {exc}") from exc

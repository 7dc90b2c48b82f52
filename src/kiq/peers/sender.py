"""The last stage of every node-to-node call: one request out to one peer, one answer back.

It owns the three things a request needs whatever asked for it, so none of them is
spread over the stages above (``client.py`` → ``hedging.py`` → ``batcher.py`` → here):

- the transport: a lookup batch, and a small read of a fan-out (``read``), goes over the
  peer's channel (one WebSocket carrying every batch, ``channel.py``) or, to a peer that
  serves none, as a ``POST`` over the pooled keep-alive connections (``pool.py``), as
  every other call does;
- the membership proof: with a cluster key a peer is sent nothing until it has proven
  it holds the secret (``POST /v1/internal/hello``: a challenge it answers sealed).
  A group member that cannot prove it is treated as a dead peer (its partitions are
  read from standbys), named once in the log, and asked again at most every
  ``PROOF_RETRY_S``;
- the seal: the request headers (``X-Kiq-Forwarded`` with this node's id, the statement
  of the caller this node verified as ``X-Kiq-Principal``, never the caller's token,
  and, with a cluster key, the credential signing the request for that one peer), and
  the check that an answer is sealed for the request it answers before it is believed.

The router hears of every peer that could not be reached, and of every one that
answered. A peer that gives no usable answer raises ``PeerError``. The sender knows
nothing of the stages that call it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import NoReturn, Protocol, TypeVar

from kiq import formats
from kiq.peers.channel import ChannelRefused, Channels, NoReads
from kiq.peers.errors import PeerError
from kiq.peers.wire import (
    CHANNEL_MAX_ROWS,
    FORWARDED,
    HEALTH_LIVE,
    INTERNAL_CHANNEL,
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    MSGPACK,
    PRINCIPAL,
    SPOKEN,
    WIRE,
    DecodeError,
    Lookup,
    LookupResult,
    agreed,
    decode_results,
    encode,
)
from kiq.security import CLUSTER_HEADER, ClusterKey, CredentialRejected

T = TypeVar("T")
log = logging.getLogger(__name__)

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


class Reachability(Protocol):
    """What the sender tells of each peer it calls: the router's record
    (``kiq.routing.Router``), which orders the replicas by it."""

    def failed(self, url: str) -> None: ...

    def succeeded(self, url: str) -> None: ...


class Sender:
    """One request to one peer: over its channel or the pool, proven, signed and checked."""

    def __init__(
        self,
        node_id: str,
        health: Reachability,
        timeout_s: float,
        cluster: ClusterKey | None,
        pool: Transport,
        channels: Channels | None,
    ) -> None:
        """``channels``: lookup batches over a channel per peer; None: each an HTTP request."""
        self._health = health
        self._timeout_s = timeout_s
        self._cluster = cluster
        self._pool = pool
        self._channels = channels
        # Peers that proved they hold the cluster secret; those that failed, until when not
        # to ask again; proofs under way (one per peer, awaited by every request meanwhile).
        self._proven: set[str] = set()
        self._refused: dict[str, float] = {}
        self._proving: dict[str, asyncio.Task[None]] = {}
        # The peer wire each proven peer agreed on at its hello (``kiq.formats``).
        self.wire: dict[str, int] = {}
        self._with_body = {FORWARDED: node_id, WIRE: SPOKEN, "content-type": MSGPACK}
        self._without_body = {FORWARDED: node_id, WIRE: SPOKEN}

    def close(self) -> None:
        """Closes the channels and the idle connections; requests still out finish on theirs."""
        if self._channels is not None:
            self._channels.close()
        self._pool.close()

    # -- what the stages above send -----------------------------------------------------

    async def send_lookups(
        self, target: str, caller: str | None, items: list[Lookup], wait_ms: int
    ) -> list[LookupResult]:
        """One batch's results, in order: over the target's channel when it serves one."""
        body = await self._post(target, INTERNAL_LOOKUPS, encode(items), caller, wait_ms, True)
        return decoded(target, decode_results, body)

    async def read(
        self, target: str, path: str, body: bytes, caller: str | None, rows: int
    ) -> bytes:
        """``call`` for a read (a multiget, scan, top or index page at ``path``) whose
        answer holds at most ``rows`` rows: on the target's channel when it carries reads
        and ``rows`` is small enough (``wire.CHANNEL_MAX_ROWS``), else a POST."""
        return await self._post(target, path, body, caller, 0, rows <= CHANNEL_MAX_ROWS)

    async def call(
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
            self._health.failed(target)
            raise PeerError(target, f"{path}: {exc}") from exc
        return self._believed(target, path, status, payload, credential)

    async def alive(self, target: str, timeout_s: float) -> bool:
        """Whether the target answers anything at all (it is alive) on its open health path."""
        headers = self._without_body  # an open path: no credential to spend on it
        try:
            await self._pool.request(target, "GET", HEALTH_LIVE, b"", headers, timeout_s)
        except ConnectionError:
            return False
        return True

    # -- transport ------------------------------------------------------------------

    async def _post(
        self,
        target: str,
        path: str,
        body: bytes,
        caller: str | None,
        wait_ms: int,
        on_channel: bool,
    ) -> bytes:
        """A POST of ``path``: on the target's channel when ``on_channel`` and it has one
        that carries it, else over the pool."""
        channels = self._channels
        if on_channel and channels is not None and channels.usable(target):
            try:
                return await self._over_channel(channels, target, body, caller, wait_ms, path)
            except NoReads:
                pass  # an older kiq: its channel carries lookup batches alone
            except ChannelRefused as exc:
                log.info("peer serves no channel url=%s reason=%s; HTTP meanwhile", target, exc)
        return await self.call(target, "POST", path, body, caller, wait_ms / 1000)

    async def _over_channel(
        self,
        channels: Channels,
        target: str,
        request: bytes,
        caller: str | None,
        wait_ms: int,
        path: str,
    ) -> bytes:
        """``call`` over the target's channel: the same credential, statement and seal as
        its ``POST``; ``ChannelRefused`` when the target has none (``NoReads``: none that
        carries reads)."""
        cluster = self._cluster
        if cluster is not None and target not in self._proven:
            await self._prove(target, cluster)
        credential = None
        if cluster is not None:  # what its POST's X-Kiq-Cluster would be
            credential = cluster.sign(target, "POST", path, request, caller)
        try:
            status, payload = await channels.request(
                target,
                request,
                credential or "",
                caller or "",
                lambda: self._headers(target, "GET", INTERNAL_CHANNEL, None, b"")[0],
                self._timeout_s + wait_ms / 1000,
                "" if path == INTERNAL_LOOKUPS else path,
            )
        except ConnectionError as exc:
            self._health.failed(target)
            raise PeerError(target, f"{INTERNAL_CHANNEL}: {exc}") from exc
        return self._believed(target, path, status, payload, credential)

    # -- the seal ---------------------------------------------------------------------

    def _believed(
        self, target: str, path: str, status: int, payload: bytes, credential: str | None
    ) -> bytes:
        """The body of a 200 answer, once its seal is checked; ``PeerError`` else."""
        self._health.succeeded(target)
        cluster = self._cluster
        if status != 200:
            if b"wire_too_new" in payload[:200]:
                _cannot_read_us(target, payload)
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

    # -- the membership proof -----------------------------------------------------------

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
            self._health.failed(target)
            raise PeerError(target, f"{INTERNAL_HELLO}: {exc}") from exc
        if status != 200 and b"wire_too_new" in payload[:200]:
            _cannot_read_us(target, payload)
            self._not_a_member(target, f"speaks none of this node's peer wire {SPOKEN}")
        version = None
        try:
            if status == 200:
                version = agreed(challenge, cluster.open(credential, payload))
            if version is None:
                raise CredentialRejected("no sealed answer to the challenge")
        except CredentialRejected:
            self._not_a_member(target, f"answered the challenge with {status}, unsealed")
        if version < formats.WIRE_OLDEST or version > formats.WIRE:
            self._not_a_member(target, f"agreed on peer wire {version}, this node speaks {SPOKEN}")
        if self.wire.get(target) != version:
            log.info("peer wire agreed url=%s version=%d", target, version)
        self.wire[target] = version

    def _not_a_member(self, target: str, why: str) -> NoReturn:
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
        self._health.failed(target)
        raise PeerError(target, "has not proven it is a cluster member")


_told: set[str] = set()


def _cannot_read_us(target: str, payload: bytes) -> None:
    """A peer that refused this node's wire as newer than it reads: said once per peer."""
    if target not in _told and len(_told) < 10_000:
        _told.add(target)
        log.error(
            "peer refused: it cannot read this node's peer wire url=%s answer=%.200r; its "
            "partitions are read from their other replicas (upgrade it)",
            target,
            payload,
        )


def decoded(target: str, decode: Callable[[bytes], T], body: bytes) -> T:
    """``decode(body)``; a malformed answer is the peer's ``PeerError``."""
    try:
        return decode(body)
    except DecodeError as exc:
        raise PeerError(target, f"sent a malformed answer: {exc}") from exc

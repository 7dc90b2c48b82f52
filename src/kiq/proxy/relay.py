"""A caller's GET relayed over pooled keep-alive connections, as a node forwards to a peer.

httpx cost the proxy about half its CPU per relayed lookup (its pool, its models, anyio
streams: py-spy, docs/benchmarks.md). A node's own pool (``kiq.peers.pool``, made
``headed`` here) writes each request as one prebuilt ``bytes`` and frames the answer
with llhttp. The retry loop stays ``kiq.client.calls.read``, the one the client and the
other routes use: ``Relay.run`` only carries out its steps, each ``Send`` first asked of
``Vouched`` (an origin it trusts, else a connection error before anything is sent; the
caller's address sealed for the node), and answers it with a ``Relayed``, which reads as
the httpx response the loop and the proxy read before.

Only GETs of one key travel here (a lookup, a key's windows): a HEAD's answer names a
body that never comes, and a page of a range or a top may pass the pool's cap on an
answer (``MAX_BODY_BYTES``), which httpx does not have; those keep httpx. The pool holds
no connection cap of its own: at most one per request in flight, and those are bounded
by ``ProxyLimits.max_requests``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from kiq.client.steps import Flow, Send, drive
from kiq.http_client import USER_AGENT, ConnectError, Response
from kiq.peers.pool import ConnectionPool, Header
from kiq.proxy.trust import Vouched, origin_of
from kiq.security.callers import HEADER as CALLER_HEADER

_MAX_ORIGINS = 4096  # base URLs whose origin is remembered (the cluster's members)


class _Headers:
    """What the retry loop reads of a response's headers (``calls.headers_of``)."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[Header]) -> None:
        self.raw = raw


class Relayed:
    """A node's answer: its status, header lines and body."""

    __slots__ = ("content", "extensions", "headers", "status_code")

    def __init__(self, status: int, lines: list[Header], content: bytes) -> None:
        self.status_code = status
        self.headers = _Headers(lines)
        self.content = content
        self.extensions: dict[str, Any] = {}

    def kept(self, hop: frozenset[bytes]) -> list[Header]:
        """The header lines the caller gets, as httpx's ``Headers.items()`` gave them before:
        names in lower case, a repeated one's values joined by ", ", ``hop`` left out."""
        merged: dict[bytes, bytes] = {}
        for name, value in self.headers.raw:
            key = name.lower()
            if key in hop:
                continue
            before = merged.get(key)
            merged[key] = value if before is None else before + b", " + value
        return list(merged.items())


class Relay:
    """Carries out ``calls.read`` flows for GETs over ``pool``, through ``gate``."""

    def __init__(self, pool: ConnectionPool, gate: Vouched, timeout_s: float) -> None:
        self._pool = pool
        self._gate = gate
        self._timeout_s = timeout_s
        self._origins: dict[str, str] = {}

    def close(self) -> None:
        """Closes the idle connections; requests still out finish on theirs."""
        self._pool.close()

    async def run(
        self, flow: Flow[Response], path: str, refresh: Callable[[], Awaitable[None]]
    ) -> Relayed:
        """The flow's answer; each ``Send`` is to a node's base URL followed by ``path``."""
        return cast(Relayed, await drive(flow, lambda step: self._send(step, path), refresh))

    async def _send(self, step: Send, path: str) -> Relayed:
        base = step.url[: len(step.url) - len(path)]
        origin = self._origins.get(base)
        if origin is None:
            if len(self._origins) >= _MAX_ORIGINS:
                self._origins.clear()
            origin = self._origins[base] = origin_of(base)
        refusal = self._gate.refusal(origin)
        if refusal is not None:
            raise ConnectError(refusal)
        headers = dict(step.headers or {})
        headers.setdefault("user-agent", USER_AGENT)  # as the httpx path sends it
        seal = self._gate.seal(step.method, path)
        if seal is not None:
            headers[CALLER_HEADER] = seal
        timeout_s = self._timeout_s + step.extra_timeout_s
        try:
            status, lines, body = await self._pool.exchange(
                base, step.method, path, step.content or b"", headers, timeout_s
            )
        except ConnectionError as exc:
            raise ConnectError(str(exc)) from exc
        return Relayed(status, lines, body)

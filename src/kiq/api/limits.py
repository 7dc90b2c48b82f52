"""The per-client rate limit: a token bucket per caller, answered with 429 and Retry-After.

A caller is the token subject the authentication put in the scope
(``scope["kiq.subject"]``), else its address. Each bucket holds up to ``burst``
requests and refills at ``rate`` per second. It is kept as one number, the time
at which it will be full again (``full_at``): a request takes one token, which
pushes ``full_at`` one interval later, and is refused when that would leave the
bucket below empty. A bucket full again is the same as no bucket, so idle
callers are dropped when the table is swept, and the table never holds more than
``clients`` buckets (the oldest go first when every caller is busy).

A second limiter of the same kind counts refused credentials per client address
(``[limits] auth_failure_rate``, on by default on a node with authentication):
``api/auth.py`` answers an address past it 429 before decoding its next token, so
junk tokens cost a dict lookup, not a signature check each.

A route says whether it is limited (``RouteSpec.limited``, routes.py): node-to-node
requests (one node forwards for many callers) and health probes are not. The limit
is put in front of a limited route's handler (``Limit``) and of the raw lookup path
(``limit_lookups``) only when it is on, so an unlimited node pays nothing for it.

A node of several processes (``kiq serve --workers N``) counts every limit once for
the node: before its app is built, each process calls ``count_node_wide`` with the
node's shared table (``api/node_buckets.py``), and the limiters made after that
(``RateLimiter.of``, ``RateLimiter.for_failures``) count in it. The table is the
process's, not the app's: the node's app is built from its settings alone
(``node_build``), the same in the home process and in each worker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kiq.api.asgi import Receive, Scope, Send
from kiq.api.errors import RateLimited, send_error
from kiq.api.node_buckets import Buckets, BucketTable
from kiq.metrics import RouteStats
from kiq.settings import LimitsSettings

SWEEP_INTERVAL_S = 10.0

Lookup = Callable[[dict[str, Any], Send, str, bytes], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

RATE_REGION = 0  # the node-wide table's region for the per-caller rate
FAILURES_REGION = 1  # and for refused credentials per address
TENANT_RATE, TENANT_BYTES, TENANT_SCANS = 2, 3, 4  # and for the tenants' (api/tenants.py)
REGIONS = 5
_node_wide: BucketTable | None = None


def count_node_wide(table: BucketTable | None) -> None:
    """Limiters made from now on count in ``table``, shared by every process of this node
    (None: each process alone, as a node of one process does)."""
    global _node_wide
    _node_wide = table


def node_wide(region: int) -> Buckets | None:
    """The node's shared ``region``, or None in a node of one process."""
    return _node_wide.region(region) if _node_wide is not None else None


class RateLimiter:
    """Token buckets by caller; ``retry_after`` is the whole call per request."""

    def __init__(
        self,
        rate: float,
        burst: int,
        clients: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1 or clients < 1:
            raise ValueError("rate, burst and clients must be positive")
        self.interval = 1.0 / rate
        self.capacity = burst * self.interval  # how far ahead of now full_at may go
        self.clients = clients
        self._full_at: dict[str, float] = {}
        self._clock = clock
        self._next_sweep = clock() + SWEEP_INTERVAL_S

    @classmethod
    def of(cls, limits: LimitsSettings) -> RateLimiter | None:
        """The node's limiter, or None when the rate limit is off."""
        if limits.rate_limit <= 0:
            return None
        if _node_wide is not None:
            return NodeWideLimiter(_node_wide.region(RATE_REGION), limits.rate_limit, limits.burst)
        return cls(limits.rate_limit, limits.burst, limits.rate_clients)

    @classmethod
    def for_failures(cls, limits: LimitsSettings) -> RateLimiter | None:
        """Refused credentials per client address (``api/auth.py``), or None when off."""
        if limits.auth_failure_rate <= 0:
            return None
        if _node_wide is not None:
            return NodeWideLimiter(
                _node_wide.region(FAILURES_REGION),
                limits.auth_failure_rate,
                limits.auth_failure_burst,
            )
        return cls(limits.auth_failure_rate, limits.auth_failure_burst, limits.rate_clients)

    def retry_after(self, caller: str) -> float:
        """0 when ``caller`` may go on (its token taken), else the seconds until it may."""
        now = self._clock()
        table = self._full_at
        full_at = table.get(caller)
        if full_at is None:  # a new caller (or one swept away): a full bucket
            if now >= self._next_sweep or len(table) >= self.clients:
                self._make_room(now)
                table = self._full_at
            full_at = now
        after = (full_at if full_at > now else now) + self.interval
        wait = after - now - self.capacity
        if wait > 1e-9:
            return wait
        table[caller] = after
        return 0.0

    def would_wait(self, caller: str) -> float:
        """What ``retry_after`` would answer, without taking a token: 0 when ``caller`` may go."""
        full_at = self._full_at.get(caller)
        if full_at is None:
            return 0.0
        now = self._clock()
        wait = (full_at if full_at > now else now) + self.interval - now - self.capacity
        return wait if wait > 1e-9 else 0.0

    def __len__(self) -> int:
        return len(self._full_at)

    def _make_room(self, now: float) -> None:
        """Drops the callers whose buckets are full again; then, if still at the bound, the
        oldest ones."""
        if now >= self._next_sweep:
            self._full_at = {k: t for k, t in self._full_at.items() if t > now}
            self._next_sweep = now + SWEEP_INTERVAL_S
        table = self._full_at
        while len(table) >= self.clients:
            del table[next(iter(table))]


class NodeWideLimiter(RateLimiter):
    """The same buckets, kept in the node's shared table: every process counts in them."""

    def __init__(
        self,
        buckets: Buckets,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,  # CLOCK_MONOTONIC: one for all processes
    ) -> None:
        super().__init__(rate, burst, clock=clock)
        self._buckets = buckets

    def retry_after(self, caller: str) -> float:
        return self._buckets.take(caller, self.interval, self.capacity, self._clock())

    def would_wait(self, caller: str) -> float:
        return self._buckets.peek(caller, self.interval, self.capacity, self._clock())

    def __len__(self) -> int:
        return self._buckets.held(self._clock())


def caller_of(scope: Scope) -> str:
    """Who a request counts against: the token's subject, else the client's address."""
    subject: str | None = scope.get("kiq.subject")
    if subject is not None:
        return subject
    return client_address(scope)


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def refusal(wait_s: float) -> RateLimited:
    seconds = max(1, math.ceil(wait_s))
    return RateLimited(f"too many requests: try again in {seconds} s", seconds)


def limit_lookups(limiter: RateLimiter, get: Lookup, stats: RouteStats) -> Lookup:
    """The lookup path behind the limiter (``Lookups.get`` answers its own errors); its
    refusals counted in the path's ``stats``, as every route's are (api/counted.py)."""
    retry_after = limiter.retry_after

    async def limited(scope: dict[str, Any], send: Send, table: str, key: bytes) -> None:
        started = time.perf_counter()
        wait = retry_after(caller_of(scope))
        if wait:
            status = await send_error(send, refusal(wait), scope)
            stats.record(status, time.perf_counter() - started)
            return
        await get(scope, send, table, key)

    return limited


class Limit:
    """A route's handler behind the limiter (a Starlette middleware, as ``auth.Guard``); a
    refusal is raised, for the app to answer as any error."""

    __slots__ = ("_app", "_retry_after")

    def __init__(self, app: Asgi, limiter: RateLimiter) -> None:
        self._app = app
        self._retry_after = limiter.retry_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wait = self._retry_after(caller_of(scope))
        if wait:
            raise refusal(wait)
        await self._app(scope, receive, send)

"""Quotas per tenant: one team's callers cannot take what another's need.

A tenant is the value of one claim of the caller's verified token (``[limits.tenants]
claim``, ``sub`` by default: each subject its own tenant; ``org`` or ``tenant``: every
token of a team counted together), else, on a node without authentication, the client's
address (the one a read worker or the proxy carries, as ``limits.caller_of``). A token
without the claim counts as its subject. Each tenant has, from ``[limits.tenants]`` or
its own ``[limits.tenants.quotas.NAME]``:

* ``rate``/``burst``: requests per second, a token bucket as ``limits.RateLimiter``;
* ``bytes_rate``: bytes of answers per second. An answer is charged once sent; a tenant
  whose debt is more than a second's worth is refused until it has paid it back;
* ``scans``: range, top, windows and index reads at once (each a page of hundreds of
  rows, where a lookup is one);
* ``watches``: watch streams open at once.

Past any of them the request is answered 429 with ``Retry-After`` (``tenant_quota``,
naming the quota) and counted in ``kiq_tenant_refused{tenant,quota}``; what is let
through in ``kiq_tenant_requests{tenant}`` and ``kiq_tenant_bytes{tenant}``. A node of
several processes counts every quota once for the node: rates and scans in the node's
shared table (``api/node_buckets.py``), watches where every watch runs, in the node's
own process. Tenants are labels only up to ``MAX_LABELS`` of them (the ones named in
``quotas`` first), the rest as ``other``: a caller cannot grow the metrics without bound.

The quotas apply where a request enters the cluster: a request a node forwards to
another is a peer's and not counted again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter

from kiq.api.asgi import Receive, Scope, Send
from kiq.api.errors import ApiError, send_error
from kiq.api.limits import (
    TENANT_BYTES,
    TENANT_RATE,
    TENANT_SCANS,
    Asgi,
    Lookup,
    client_address,
    node_wide,
)
from kiq.api.node_buckets import Buckets
from kiq.metrics import NodeMetrics, RouteStats
from kiq.security.tokens import verified_claims
from kiq.settings import TenantLimits, TenantQuota

SUBJECT = "kiq.subject"  # as api/auth.py sets it
MAX_LABELS = 100
_NAMES_KEPT = 10_000  # tenants of tokens remembered per process, by Authorization header
_SCAN_MARKS = ("/range", "/top", "/windows", "/by/")
_WATCH_MARK = "/watch"
REQUEST, SCAN, WATCH = "request", "scan", "watch"


class QuotaExceeded(ApiError):
    """A tenant is past one of its quotas."""

    status, code = 429, "tenant_quota"
    retriable = True

    def __init__(self, message: str, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.headers = ((b"retry-after", str(retry_after_s).encode()),)


class Quota:
    """A tenant's quota as numbers (its own where set, else the default)."""

    __slots__ = (
        "burst",
        "bytes_capacity",
        "bytes_interval",
        "capacity",
        "interval",
        "scans",
        "watches",
    )

    def __init__(self, default: TenantLimits, own: TenantQuota | None) -> None:
        def pick(name: str) -> Any:
            value = getattr(own, name) if own is not None else None
            return getattr(default, name) if value is None else value

        rate, burst, bytes_rate = pick("rate"), pick("burst"), pick("bytes_rate")
        if own is not None and own.rate is not None and own.burst is None:
            burst = 0  # its own rate: a second of it, not the default's burst
        self.interval = 1.0 / rate if rate else 0.0
        self.burst = burst or max(1, int(rate + 0.999)) if rate else 0
        self.capacity = self.burst * self.interval
        self.bytes_interval = 1.0 / bytes_rate if bytes_rate else 0.0  # seconds per byte
        self.bytes_capacity = 1.0  # a second's worth of bytes owed before refusals
        self.scans: int = pick("scans")
        self.watches: int = pick("watches")


class Tenants:
    """The node's tenants and their counts; one per node process."""

    def __init__(
        self,
        limits: TenantLimits,
        metrics: NodeMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        authenticated: bool = False,
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._authenticated = authenticated
        self._claim = limits.claim
        self._default = Quota(limits, None)
        self._quotas = {name: Quota(limits, own) for name, own in limits.quotas.items()}
        self._names: dict[bytes, str] = {}
        self._rates: Buckets | _Local = node_wide(TENANT_RATE) or _Local()
        self._bytes: Buckets | _Local = node_wide(TENANT_BYTES) or _Local()
        self._scans: Buckets | _Local = node_wide(TENANT_SCANS) or _Local()
        self._watches = _Local()  # a watch always runs in the node's own process
        self._labels = dict.fromkeys(limits.quotas)
        self._requests, self._sent, self._refused = _counters(metrics)

    @classmethod
    def of(
        cls, limits: TenantLimits, metrics: NodeMetrics | None, authenticated: bool
    ) -> Tenants | None:
        """The node's tenants, or None when no tenant has a quota (nothing is counted)."""
        return cls(limits, metrics, authenticated=authenticated) if limits.enabled else None

    def tenant_of(self, scope: Scope) -> str:
        """Who a request counts against: its token's claim, else its subject, else address."""
        subject: str | None = scope.get(SUBJECT)
        if subject is None:
            return client_address(scope)
        if self._claim == "sub":
            return subject
        for name, value in scope["headers"]:
            if name == b"authorization":
                found = self._names.get(value)
                if found is None:
                    found = _claim_of(value, self._claim) or subject
                    if len(self._names) >= _NAMES_KEPT:
                        self._names.clear()
                    self._names[value] = found
                return found
        return subject  # a peer's statement: no token to read a claim from

    def quota(self, tenant: str) -> Quota:
        return self._quotas.get(tenant, self._default)

    def admit(self, tenant: str, kind: str) -> Quota:
        """The tenant's quota once this request may go on; ``QuotaExceeded`` when not."""
        quota = self._quotas.get(tenant, self._default)
        now = self._clock()
        if quota.interval:
            wait = self._rates.take(tenant, quota.interval, quota.capacity, now)
            if wait:
                self._refuse(tenant, "rate", wait, f"{quota.burst} requests at once")
        if quota.bytes_interval:
            wait = self._bytes.peek(tenant, 0.0, quota.bytes_capacity, now)
            if wait:
                self._refuse(tenant, "bytes_rate", wait, "bytes of answers per second")
        if kind == SCAN and quota.scans and not self._scans.enter(tenant, quota.scans):
            self._refuse(tenant, "scans", 1.0, f"{quota.scans} range, top or index reads at once")
        if kind == WATCH and quota.watches and not self._watches.enter(tenant, quota.watches):
            self._refuse(tenant, "watches", 5.0, f"{quota.watches} watch streams open")
        self._requests.labels(self._label(tenant)).inc()
        return quota

    def done(self, tenant: str, kind: str, quota: Quota, sent: int) -> None:
        """After a request ``admit`` let through: its place given back, its bytes charged."""
        if kind == SCAN and quota.scans:
            self._scans.leave(tenant)
        elif kind == WATCH and quota.watches:
            self._watches.leave(tenant)
        if sent:
            if quota.bytes_interval:
                self._bytes.charge(tenant, sent * quota.bytes_interval, self._clock())
            self._sent.labels(self._label(tenant)).inc(sent)

    def _refuse(self, tenant: str, quota: str, wait: float, what: str) -> None:
        self._refused.labels(self._label(tenant), quota).inc()
        seconds = max(1, int(wait + 0.999))
        raise QuotaExceeded(
            f"tenant {tenant!r} is past its quota of {what} ([limits.tenants] {quota}); "
            f"try again in {seconds} s, or ask the operator for a larger quota",
            seconds,
            quota=quota,
        )

    def _label(self, tenant: str) -> str:
        labels = self._labels
        if tenant in labels:
            return tenant
        if len(labels) < MAX_LABELS:
            labels[tenant] = None
            return tenant
        return "other"


def kind_of(path: str) -> str:
    """Whether a route's path is a scan, a watch or any other request."""
    if path.endswith(_WATCH_MARK):
        return WATCH
    if any(mark in path for mark in _SCAN_MARKS):
        return SCAN
    return REQUEST


class TenantGate:
    """A limited route's handler behind its tenant's quotas (a Starlette middleware, after
    the rule that verified the caller): the answer's bytes counted as they are sent."""

    __slots__ = ("_app", "_kind", "_tenants")

    def __init__(self, app: Asgi, tenants: Tenants, kind: str) -> None:
        self._app = app
        self._tenants = tenants
        self._kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenants, kind = self._tenants, self._kind
        tenant = tenants.tenant_of(scope)
        quota = tenants.admit(tenant, kind)
        app = self._app
        await _answered(tenants, tenant, kind, quota, lambda out: app(scope, receive, out), send)


def gate_lookups(tenants: Tenants, get: Lookup, stats: RouteStats) -> Lookup:
    """The raw lookup path behind the tenants' quotas: refusals answered as errors are, and
    counted in the path's ``stats`` as its other refusals are."""

    async def gated(scope: dict[str, Any], send: Send, table: str, key: bytes) -> None:
        started = time.perf_counter()
        tenant = tenants.tenant_of(scope)
        try:
            quota = tenants.admit(tenant, REQUEST)
        except QuotaExceeded as refused:
            stats.record(await send_error(send, refused, scope), time.perf_counter() - started)
            return
        await _answered(
            tenants, tenant, REQUEST, quota, lambda out: get(scope, out, table, key), send
        )

    return gated


async def _answered(
    tenants: Tenants,
    tenant: str,
    kind: str,
    quota: Quota,
    answer: Callable[[Send], Awaitable[None]],
    send: Send,
) -> None:
    """``answer(send)`` for a request ``admit`` let through, then ``done``: with the bytes
    it sent counted when the tenant's quota has a ``bytes_rate``."""
    if not quota.bytes_interval:
        try:
            await answer(send)
        finally:
            tenants.done(tenant, kind, quota, 0)
        return
    sent = 0

    async def counting(message: Any) -> None:
        nonlocal sent
        if message["type"] == "http.response.body":
            sent += len(message.get("body", b""))
        await send(message)

    try:
        await answer(counting)
    finally:
        tenants.done(tenant, kind, quota, sent)


class _Local:
    """The counts of one process, for a node of one process (``Buckets``' operations)."""

    __slots__ = ("_counts", "_full_at")

    def __init__(self) -> None:
        self._full_at: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def take(self, caller: str, interval: float, capacity: float, now: float) -> float:
        full_at = self._full_at.get(caller, now)
        after = (full_at if full_at > now else now) + interval
        wait = after - now - capacity
        if wait > 1e-9:
            return wait
        self._full_at[caller] = after
        self._sweep(now)
        return 0.0

    def peek(self, caller: str, interval: float, capacity: float, now: float) -> float:
        full_at = self._full_at.get(caller, now)
        wait = (full_at if full_at > now else now) + interval - now - capacity
        return wait if wait > 1e-9 else 0.0

    def charge(self, caller: str, interval: float, now: float) -> None:
        full_at = self._full_at.get(caller, now)
        self._full_at[caller] = (full_at if full_at > now else now) + interval
        self._sweep(now)

    def enter(self, caller: str, most: int) -> bool:
        count = self._counts.get(caller, 0)
        if count >= most:
            return False
        self._counts[caller] = count + 1
        return True

    def leave(self, caller: str) -> None:
        count = self._counts.get(caller, 0) - 1
        if count > 0:
            self._counts[caller] = count
        else:
            self._counts.pop(caller, None)

    def _sweep(self, now: float) -> None:
        """Buckets full again are dropped once there are many: an idle tenant costs nothing."""
        if len(self._full_at) > _NAMES_KEPT:
            self._full_at = {k: t for k, t in self._full_at.items() if t > now}


def _claim_of(authorization: bytes, claim: str) -> str | None:
    """The (verified) bearer token's ``claim`` as text; None when it has none."""
    claims = verified_claims(authorization)
    value = claims.get(claim) if claims is not None else None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _counters(metrics: NodeMetrics | None) -> tuple[Counter, Counter, Counter]:
    registry = metrics.registry if metrics is not None else None
    return (
        Counter(
            "kiq_tenant_requests",
            "requests a tenant's quotas let through",
            ["tenant"],
            registry=registry,
        ),
        Counter(
            "kiq_tenant_bytes", "bytes of answers sent to a tenant", ["tenant"], registry=registry
        ),
        Counter(
            "kiq_tenant_refused",
            "requests refused for a tenant's quota",
            ["tenant", "quota"],
            registry=registry,
        ),
    )

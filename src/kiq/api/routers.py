"""The routers built from the route table: each handler behind its rule and its limit.

``route`` makes one declared route (a core one from routes.py, or an application's
from endpoints.py) a Starlette route whose middleware is what its ``Rule`` asks of
the caller (``auth.Guard``) and then the rate limit (``limits.Limit``), each only
when this node has it. ``unmatched`` answers a path no route takes, behind the rule
its prefix asks. The core router takes every path under ``RESERVED``; the
application's its own, with the same ``route``.

A route answers its one method; any other request is a 404 ``no_route``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route, Router

from kiq.api.asgi import Receive, Scope, Send
from kiq.api.auth import Access, Guard
from kiq.api.counted import Counted, route_label
from kiq.api.errors import NoRoute
from kiq.api.handlers import Handlers
from kiq.api.holds import Held, Holds
from kiq.api.limits import Asgi, Limit, RateLimiter
from kiq.api.paced import Paced, bounded
from kiq.api.precedence import specificity
from kiq.api.routes import CORE, MEMBERS
from kiq.api.spec import RouteSpec, Rule
from kiq.api.tenants import SCAN, TenantGate, Tenants, kind_of
from kiq.metrics import NodeMetrics
from kiq.peers.wire import INTERNAL_LOOKUPS
from kiq.routing.turns import ScanGate


class _Route(Route):
    """A route for one method only (no implied HEAD); another method finds no route."""

    def __init__(
        self, method: str, path: str, endpoint: Callable[..., Any], middleware: list[Middleware]
    ) -> None:
        super().__init__(path, endpoint, methods=[method], middleware=middleware)
        self.methods = {method}

    def matches(self, scope: Any) -> tuple[Match, Any]:
        match, child = super().matches(scope)
        return (Match.NONE, {}) if match is Match.PARTIAL else (match, child)


class _Handler:
    """A core handler as the ASGI app its route runs: its ``Request`` made, its ``Response``
    sent. What it raises goes on to the one place errors become answers (server.py), as
    Starlette's own adapter passes it on to a router with no handlers of its own; without
    that adapter's layers, which a table read paid on every request."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Callable[[Request], Awaitable[Response]]) -> None:
        self._handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._handle(Request(scope, receive))
        await response(scope, receive, send)


def _checks(
    rule: Rule,
    limited: bool,
    access: Access | None,
    limiter: RateLimiter | None,
    holds: Holds | None = None,
    tenants: Tenants | None = None,
    path: str = "",
    gate: ScanGate | None = None,
) -> list[Middleware]:
    """What runs before a handler, outermost first: its rule, then the limit, which counts
    the caller the rule verified, then the caller's cap on requests in flight (api/holds.py),
    then its tenant's quotas (api/tenants.py). Nothing a node does not need."""
    stack = []
    check = access.check(rule) if access is not None else None
    if check is not None:
        stack.append(Middleware(Guard, check))
    if limited and limiter is not None:
        stack.append(Middleware(Limit, limiter))
    if limited and holds is not None:
        stack.append(Middleware(Held, holds))
    if limited and tenants is not None:
        stack.append(Middleware(TenantGate, tenants, kind_of(path)))
    if limited and gate is not None and kind_of(path) == SCAN:
        stack.append(Middleware(Paced, gate, bounded(path)))
    return stack


def route(
    spec: RouteSpec[Any],
    endpoint: Callable[..., Any],
    access: Access | None,
    limiter: RateLimiter | None,
    holds: Holds | None = None,
    metrics: NodeMetrics | None = None,
    tenants: Tenants | None = None,
    gate: ScanGate | None = None,
) -> _Route:
    """``spec``'s route to ``endpoint`` (a Starlette handler, or an ASGI app), behind its
    rule and limits; counted in ``metrics`` under its declared pattern (api/counted.py)."""
    stack = _checks(spec.access, spec.limited, access, limiter, holds, tenants, spec.path, gate)
    if metrics is not None:
        stack.insert(0, Middleware(Counted, metrics, route_label(spec.method, spec.path)))
    return _Route(spec.method, spec.path, endpoint, stack)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    raise NoRoute("no such path; see /v1/tables and /v1/metadata")


def unmatched(access: Access | None, limiter: RateLimiter | None) -> Asgi:
    """What answers a path no route takes: a 404, but only to a caller (fail closed), or
    under the members' prefix to a member; counted by the limit but there."""

    def behind(rule: Rule, limited: bool) -> Asgi:
        app: Asgi = _no_route
        for cls, args, kwargs in reversed(_checks(rule, limited, access, limiter)):
            app = cls(app, *args, **kwargs)
        return app

    members, public = behind(Rule.CLUSTER, False), behind(Rule.CALLER, True)
    if members is public:  # neither has a check: a node without authentication or limit
        return _no_route

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        app = members if scope["path"].startswith(MEMBERS) else public
        await app(scope, receive, send)

    return default


def core_router(
    handlers: Handlers,
    access: Access | None,
    limiter: RateLimiter | None,
    holds: Holds | None = None,
    metrics: NodeMetrics | None = None,
    tenants: Tenants | None = None,
    gate: ScanGate | None = None,
) -> Router:
    """The core routes but the raw lookup path: every path under ``RESERVED`` is answered
    here. Peers' lookup batches are counted by ``Lookups`` itself, as ``internal_lookups``,
    on this route and on a channel alike."""
    routes = [
        route(
            spec,
            _Handler(functools.partial(spec.endpoint, handlers)),
            access,
            limiter,
            holds,
            metrics if spec.path != INTERNAL_LOOKUPS else None,
            tenants,
            gate,
        )
        for spec in CORE
        if spec.endpoint is not None
    ]
    return _router(routes, unmatched(access, limiter))


def app_router(
    routes: Sequence[tuple[RouteSpec[Any], Asgi]],
    access: Access | None,
    limiter: RateLimiter | None,
    holds: Holds | None = None,
    metrics: NodeMetrics | None = None,
    tenants: Tenants | None = None,
    gate: ScanGate | None = None,
) -> Router:
    """An application's routes, for paths outside ``RESERVED``: each spec with its ASGI
    endpoint, an object (Starlette takes a plain function for a request handler)."""
    built = [
        route(spec, endpoint, access, limiter, holds, metrics, tenants, gate)
        for spec, endpoint in routes
    ]
    return _router(built, unmatched(access, limiter))


def _router(routes: Sequence[_Route], default: Asgi) -> Router:
    """A router trying ``routes`` most specific first: a literal segment before a parameter,
    a parameter before a catch-all, whatever the order declared (api/precedence.py)."""
    ordered = sorted(routes, key=lambda r: specificity(r.path))
    return Router(ordered, redirect_slashes=False, default=default)

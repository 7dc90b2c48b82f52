"""The ASGI application of one node: the raw lookup path, then Starlette's routers.

  GET /v1/tables/{table}/keys/{key}    point lookup (lookups.py, the hot path)

is matched first by hand, at the cost of a few string operations; every other
route is a declaration (routes.py for the core, endpoints.py for the application's)
and the routers, their checks, the limits and /openapi.json are built from them.
The core router answers every path under the reserved prefixes; the application's
router the others, so no pattern of theirs ever reaches a core path.
What a node checks is decided once, here: on a node without authentication or a rate
limit, the raw path calls ``Lookups.get`` itself and no handler has a guard in front.
Whatever a route raises ends here, in ``send_error`` (api/errors.py), as it does
inside ``Lookups.get``: one door from exceptions to responses.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

from kiq.api import openapi
from kiq.api.auth import Access, caller, guard_lookup
from kiq.api.batches import Batches
from kiq.api.counted import route_label
from kiq.api.errors import error_response, send_error
from kiq.api.handlers import Handlers
from kiq.api.holds import Holds
from kiq.api.limits import Lookup, RateLimiter, limit_lookups
from kiq.api.lookups import Lookups
from kiq.api.paced import WINDOWS
from kiq.api.relayed import RelayedCallers
from kiq.api.routers import app_router, core_router
from kiq.api.routes import CORE, LOOKUP, is_core
from kiq.api.spec import RouteSpec
from kiq.api.tenants import Tenants, gate_lookups
from kiq.api.watch import WatchApi
from kiq.app.endpoints import Declare, declared_routes, endpoints_for
from kiq.live import Watches
from kiq.metrics import NodeMetrics
from kiq.node import NodeView, ServedNode
from kiq.ops.dashboard import PipelineProgress
from kiq.ops.versions import CatalogAdmin, VersionsApi
from kiq.peers import HedgePolicy, Peers
from kiq.peers.channel_server import LookupChannels
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    INTERNAL_BY_INDEX_MANY,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    INTERNAL_TOP,
    INTERNAL_TOP_MANY,
)
from kiq.routing import ReplicaReader, Router
from kiq.routing.turns import ScanGate
from kiq.security import Security
from kiq.settings import LimitsSettings

log = logging.getLogger(__name__)

# The raw lookup path's prefix, from its declaration (/v1/tables/{table}/keys/{key}).
_TABLES = LOOKUP.path.partition("{table}")[0]
_KEY_ROUTES = (b"/windows", b"/watch")  # a key's own routes, under its lookup path


class RecordWriter(Protocol):
    """Where the application's routes write (``kiq.node_build.LogWriter``: Kafka)."""

    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]:
        """(partition, offset) once the log has the record (``None``: a tombstone); raises
        ``WriteFailed``."""
        ...

    def close(self) -> None: ...


AppRoutes = Iterable[str | Declare]


class KiqApp:
    def __init__(
        self,
        node: ServedNode,
        writer: RecordWriter,
        peers: Peers | None = None,
        start_node: bool = True,
        endpoints: AppRoutes = (),
        base: str | None = None,
        limits: LimitsSettings | None = None,
        security: Security | None = None,
        peer_ssl: ssl.SSLContext | None = None,
        progress: PipelineProgress | None = None,
        catalog: CatalogAdmin | None = None,
        home: str | None = None,
    ) -> None:
        limits = limits if limits is not None else LimitsSettings()
        view = NodeView(node)
        self.access = (
            Access(
                security.tokens,
                security.cluster,
                view.url,
                RateLimiter.for_failures(limits) if security.tokens is not None else None,
            )
            if security is not None and security.enabled
            else None
        )
        self.limiter = RateLimiter.of(limits)
        authenticated = security is not None and security.tokens is not None
        self.tenants = Tenants.of(limits.tenants, view.metrics, authenticated)
        # A proxy's callers, each by its own address (api/relayed.py): on with a cluster secret.
        cluster_key = security.cluster if security is not None else None
        self._callers = RelayedCallers(cluster_key.callers()) if cluster_key is not None else None
        self._node = node
        self._start_node = start_node
        self.router = Router(view.node_id, home=home)
        if peers is None:
            peers = Peers(
                view.node_id,
                self.router,
                view.forward_timeout_ms,
                hedging=HedgePolicy.of(node.settings),
                hedge_stats=view.metrics.hedges,
                cluster=security.cluster if security is not None else None,
                ssl_context=peer_ssl,
            )
        self.peers = peers
        reader = ReplicaReader(view, self.router, peers, limits)
        self.lookups = Lookups(view, reader, peers)
        self.batches = Batches(view, reader, limits.max_multiget_keys)
        # peers' lookup batches and small reads, checked and answered as their POSTs would be
        self._channels = LookupChannels(
            self.lookups,
            self.access,
            caller,
            error_response,
            {
                INTERNAL_MULTIGET: self.batches.internal_multiget,
                INTERNAL_SCAN: self.batches.internal_scan,
                INTERNAL_TOP: self.batches.internal_top,
                INTERNAL_TOP_MANY: self.batches.internal_top_many,
                INTERNAL_BY_INDEX: self.batches.internal_by_index,
                INTERNAL_BY_INDEX_MANY: self.batches.internal_by_index_many,
            },
            _counted_as_posts(view.metrics),
        )
        self._writer = writer
        declared = list(declared_routes(endpoints, base))
        self.watches = Watches(
            view.node_id,
            view.replicas,
            view.taps,
            reader,
            limits.stream_slots,
            limits.max_watch_pending,
            relay_only=home is not None,
        )
        # No caller holds the node's connection slots (api/holds.py).
        self.holds = Holds(
            "requests",
            limits.max_requests_per_caller,
            limits.request_slots,
            "max_requests_per_caller",
        )
        watch_holds = Holds(
            "watch streams",
            limits.max_watches_per_caller,
            limits.stream_slots,
            "max_watches_per_caller",
        )
        watch_api = WatchApi(view, self.watches, watch_holds)
        custom = endpoints_for(
            declared, self.lookups, self.batches, writer, limits.max_body_bytes, watch_api
        )
        handlers = Handlers(
            view,
            self.lookups,
            self.batches,
            peers,
            limits.max_body_bytes,
            self.access,
            watch_api,
            VersionsApi(view, peers, catalog, progress),
        )
        # Every route counted in /metrics under its declared pattern (api/counted.py).
        lookups_served = self.lookups.stats.statuses
        # Scan pages one at a time, yielding to the lookups while there are any.
        self.scan_gate = ScanGate(lambda: sum(lookups_served.values()))
        limits_of = (
            self.access,
            self.limiter,
            self.holds,
            view.metrics,
            self.tenants,
            self.scan_gate,
        )
        core_routes = core_router(handlers, *limits_of)
        own_routes = app_router(custom, *limits_of)
        # A key's windows, read about as often as the key: its route (checks and all) is
        # called straight from the path, as the raw lookup path is, not matched against
        # every route first.
        self._windows = next(r for r in core_routes.routes if getattr(r, "path", "") == WINDOWS)
        self.routers = (core_routes, own_routes)  # core paths, the application's (is_core)
        # Every route this node answers, as declared: what /openapi.json is made from.
        self.specs: tuple[RouteSpec[Any], ...] = (*CORE, *declared)
        secured = security is not None and security.tokens is not None
        handlers.document = openapi.render(self.specs, _version(), secured=secured)
        handlers.progress = progress

        async def dispatch(scope: dict[str, Any], receive: Any, send: Any) -> None:
            router = core_routes if is_core(scope["path"]) else own_routes
            await router(scope, receive, send)

        self._routes = dispatch
        # The raw path: its rule and limit as declared (LOOKUP), each only when this node has
        # it; unwrapped on a node without either.
        # Their refusals count under the path's name in /metrics, as its answers do.
        self._lookup: Lookup = self.lookups.get
        if self.tenants is not None and LOOKUP.limited:
            self._lookup = gate_lookups(self.tenants, self._lookup, self.lookups.stats)
        if self.limiter is not None and LOOKUP.limited:
            self._lookup = limit_lookups(self.limiter, self._lookup, self.lookups.stats)
        if self.access is not None:
            self._lookup = guard_lookup(
                self.access, LOOKUP.access, self._lookup, self.lookups.stats
            )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if self._callers is not None:
                self._callers.take(scope)
            app = self._routes
            if scope["method"] == "GET":
                path: str = scope["path"]
                if path.startswith(_TABLES):
                    raw = scope.get("raw_path") or path.encode()
                    table, sep, key = raw[len(_TABLES) :].partition(b"/keys/")
                    # .../keys/{key}/windows and .../watch are routes of their own
                    if sep and b"/" not in table and not key.endswith(_KEY_ROUTES):
                        await self._lookup(scope, send, table.decode("latin-1"), key)
                        return
                    if sep and key.endswith(b"/windows"):
                        # as its pattern would match it: the decoded path, no / in either
                        name, _, rest = path[len(_TABLES) :].partition("/keys/")
                        key_text = rest[: -len("/windows")]
                        if name and key_text and "/" not in name and "/" not in key_text:
                            scope["path_params"] = {"table": name, "key": key_text}
                            app = self._windows.handle
            try:
                await app(scope, receive, send)
            except Exception as exc:
                await send_error(send, exc, scope)
        elif kind == "websocket":
            await self._channels(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def end_streams(self) -> None:
        """Ends every watch stream (their subscribers may resume on another node): a server
        stopping gracefully waits for open requests, and a stream stays open until then."""
        self.watches.close()

    async def close_channels(self, timeout_s: float) -> None:
        """Closes the peers' lookup channels saying this node is going away, so they fail
        their batches in flight at once and ask another replica. Awaited before the server
        is told to stop: a stopping granian delivers nothing sent on a websocket."""
        await self._channels.going_away(timeout_s)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self._start_node:
                        await asyncio.to_thread(self._node.start)
                except Exception as exc:
                    log.exception("node start failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                # What start-up made lives as long as the node: out of the collector's way,
                # so a full collection walks only what was made since (tens of ms less, at
                # whatever moment it comes, on the requests waiting behind it). Full
                # collections a tenth as often: after the freeze almost nothing counts as
                # long-lived, and the pages in flight would set one off every few pages.
                gc.collect()
                gc.freeze()
                gc.set_threshold(GC_YOUNG, GC_MIDDLE, GC_FULL)
                sys.setswitchinterval(SWITCH_INTERVAL_S)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.watches.close()
                self.peers.close()
                self._writer.close()
                if self._start_node:
                    await asyncio.to_thread(self._node.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return


# The collector's thresholds on a serving node (CPython's defaults: 700, 10, 10).
GC_YOUNG, GC_MIDDLE, GC_FULL = 700, 10, 100
# How long a thread waiting for the GIL waits before the holder is made to let go
# (CPython's default: 5 ms). granian's thread takes the GIL to hand each request to the
# event loop; while scan slices keep the loop busy, the loop takes the GIL back at once
# each time it lets go, and the request waited the whole interval.
SWITCH_INTERVAL_S = 0.001


def _counted_as_posts(metrics: NodeMetrics) -> Callable[[str, int, float], None]:
    """Where a read answered on a channel is counted: under its POST's route, as over HTTP."""

    def record(path: str, status: int, seconds: float) -> None:
        metrics.route(route_label("POST", path)).record(status, seconds)

    return record


def _version() -> str:
    try:
        return version("kiq")
    except PackageNotFoundError:
        return "0"


def create_app(
    node: ServedNode,
    writer: RecordWriter,
    peers: Peers | None = None,
    start_node: bool = True,
    endpoints: AppRoutes = (),
    base: str | None = None,
    limits: LimitsSettings | None = None,
    security: Security | None = None,
    peer_ssl: ssl.SSLContext | None = None,
    progress: PipelineProgress | None = None,
    catalog: CatalogAdmin | None = None,
    home: str | None = None,
) -> KiqApp:
    """The app serving ``node``; ``writer`` takes the application's writes.

    ``endpoints`` declare the application's routes: functions, or targets
    (``module:function``, ``file.py:function`` looked for beside ``base`` first);
    by default the shipped stock and word-count routes. ``peers`` carries requests
    to other nodes (made from the node's settings when not given); the app closes
    it and the writer, and starts and stops the node unless told not to. ``limits``:
    the ``[limits]`` the API enforces itself (body size, multiget keys, the rate). With
    ``security`` (``kiq.security.security_for``), callers and peers are checked;
    ``peer_ssl`` verifies ``https://`` peers (``kiq.security.tls.client_context``).
    ``progress``: where GET /v1/pipelines reads the pipelines' progress (none: it has none).
    ``catalog``: where ``kiq switch`` and ``kiq retire`` write (none: this node moves no
    versions). ``home``: a read worker's node (``kiq.workers``), where what this process
    cannot answer goes.
    """
    return KiqApp(
        node,
        writer,
        peers,
        start_node,
        endpoints,
        base,
        limits,
        security,
        peer_ssl,
        progress,
        catalog,
        home,
    )

"""Each route's requests counted by status and latency, under its declared pattern.

The label is the route as declared, ``GET /v1/words/{word}``, never the path asked
for: /metrics has one series per route, however many keys or words are asked. The
raw lookup path counts itself (``get``, api/lookups.py), and so do peers' lookup
batches (``internal_lookups``), whichever way they come.
"""

from __future__ import annotations

import time

from kiq.api.asgi import Message, Receive, Scope, Send
from kiq.api.errors import send_error
from kiq.api.limits import Asgi
from kiq.metrics import NodeMetrics, RouteStats


def route_label(method: str, path: str) -> str:
    """A route's name in /metrics and on the dashboard: its method and declared pattern."""
    return f"{method} {path}"


class Counted:
    """The outermost check of a route: what it answered, a refusal by its rule or limit
    included, as ``send_error`` answers what the route raised."""

    __slots__ = ("_app", "_label", "_metrics", "_stats")

    def __init__(self, app: Asgi, metrics: NodeMetrics, label: str) -> None:
        self._app = app
        self._metrics = metrics
        self._label = label
        self._stats: RouteStats | None = None  # made at the first request: no empty series

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, sending)
        except Exception as exc:
            if status:  # the answer had begun: the server closes the connection
                raise
            status = await send_error(send, exc, scope)
        finally:
            if status:  # none: the request was cancelled before any answer, nothing to count
                if self._stats is None:
                    self._stats = self._metrics.route(self._label)
                self._stats.record(status, time.perf_counter() - started)

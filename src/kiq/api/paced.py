"""Scan routes behind the node's ``ScanGate`` (routing/turns.py): their pages one at a time,
yielding to the lookups while there are any.

The gate is put in front of a limited route whose path reads pages (``tenants.kind_of``:
range, top, windows, index), innermost, after the caller was verified and counted, so a
refused request never waits for it. A page a peer asks for (``/v1/internal/*``) is not
gated: the node that took the caller's request holds its gate for the whole page.
"""

from __future__ import annotations

from kiq.api.asgi import Receive, Scope, Send
from kiq.api.limits import Asgi
from kiq.routing.turns import ScanGate


class Paced:
    """A scan route's handler, run in its turn of the node's gate (a Starlette middleware)."""

    __slots__ = ("_app", "_gate")

    def __init__(self, app: Asgi, gate: ScanGate) -> None:
        self._app = app
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._gate.page():
            await self._app(scope, receive, send)

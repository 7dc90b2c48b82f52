"""Scan routes behind the node's ``ScanGate`` (routing/turns.py): their pages one at a time,
yielding to the lookups while there are any.

The gate is put in front of a limited route whose path reads pages (``tenants.kind_of``:
range, top, windows, index), innermost, after the caller was verified and counted, so a
refused request never waits for it. A page a peer asks for (``/v1/internal/*``) is not
gated: the node that took the caller's request holds its gate for the whole page.

A small bounded page (``bounded``) goes straight through: a plain top of at most
``SMALL_PAGE`` keys (no prefix, no window: those read the order on past keys they skip)
and a page of at most ``SMALL_PAGE`` of one key's windows (one partition). Each reads at
most ``SMALL_PAGE`` rows of a partition, a hundredth of the keys one multiget takes
ungated; behind the gate it waited for every page before it, each holding the gate over
its round trips to peers (`kiq bench tables`: a top-10's p50 was 20 lookups', the node
idle most of the time). They run ``unpaced``: their slices take no turns either.
"""

from __future__ import annotations

from collections.abc import Callable

from kiq.api.asgi import Receive, Scope, Send, query
from kiq.api.limits import Asgi
from kiq.routing.turns import SMALL_PAGE, ScanGate, unpaced

TOP = "/v1/tables/{table}/top"
WINDOWS = "/v1/tables/{table}/keys/{key}/windows"

Small = Callable[[Scope], bool]


def _small_top(scope: Scope) -> bool:
    params = query(scope)
    if params.get("prefix") or params.get("window"):
        return False
    return _at_most(params.get("n"), 10)


def _small_windows(scope: Scope) -> bool:
    return _at_most(query(scope).get("limit"), 100)


def _at_most(raw: str | None, default: int) -> bool:
    """Whether a page's size (its default when not given) is at most ``SMALL_PAGE``; a
    size that is no number is not small (the gate, then the handler's 400)."""
    if not raw:
        return default <= SMALL_PAGE
    return raw.isdigit() and len(raw) <= 4 and int(raw) <= SMALL_PAGE


def bounded(path: str) -> Small | None:
    """What tells a small page of the core route ``path`` (module docstring); None for a
    route whose every page waits for the gate (an application's too: its pages are its own)."""
    return {TOP: _small_top, WINDOWS: _small_windows}.get(path)


class Paced:
    """A scan route's handler, run in its turn of the node's gate (a Starlette middleware),
    but for a small page (``small``, when given)."""

    __slots__ = ("_app", "_gate", "_small")

    def __init__(self, app: Asgi, gate: ScanGate, small: Small | None = None) -> None:
        self._app = app
        self._gate = gate
        self._small = small

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._small is not None and self._small(scope):
            with unpaced():
                await self._app(scope, receive, send)
            return
        async with self._gate.page():
            await self._app(scope, receive, send)

"""Requests a caller holds open at once: no caller may take the node's connection slots.

A node has ``[limits] max_connections`` slots (granian's: a connection holds one while
open). A watch stream holds its slot for ever, and any request holds one while it runs,
so without a cap per caller one token could take them all and the node would answer
nobody, health probes and peers included. ``Holds`` counts what is open per caller
(the token's subject, else the client's address: the one a read worker or the proxy
carries, see ``api/limits.caller_of``) and in all, and refuses past either cap:

* ``max_watches_per_caller`` watch streams per caller (api/watch.py), within the node's
  stream slots (``LimitsSettings.stream_slots``);
* ``max_requests_per_caller`` requests in flight per caller on every limited route
  (``Held``, put in front of a handler by api/routers.py), within the node's slots less
  ``reserved_connections``.

Health probes (``/v1/health/*``) and peers (``/v1/internal/*``) are not limited routes:
they are never counted and find the reserved slots free. Counts live in one process
(the node's, or one read worker's); a watch always lands on the node's own process.
"""

from __future__ import annotations

import logging
from typing import Any

from kiq.api.asgi import Receive, Scope, Send
from kiq.api.errors import ApiError
from kiq.api.limits import Asgi, caller_of

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5  # a held request frees its slot when it ends: no sooner to be known


class TooManyHeld(ApiError):
    """A caller (or the node) holds as many requests of a kind open as a cap allows."""

    status, code = 429, "too_many_open"
    retriable = True

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, retry_after_s=RETRY_AFTER_S, **details)
        self.headers = ((b"retry-after", str(RETRY_AFTER_S).encode()),)


class NodeFull(TooManyHeld):
    """The node holds as many as its slots allow, from all callers: another node may not."""

    status, code = 503, "node_full"


class Holds:
    """Open holds of one kind (``what``: "watch streams", "requests"), per caller and in
    all, under ``per_caller`` and ``most``. Used from the event loop only; a caller of
    None counts against ``most`` alone."""

    __slots__ = ("_by_caller", "held", "most", "per_caller", "setting", "what")

    def __init__(self, what: str, per_caller: int, most: int, setting: str) -> None:
        self.what = what
        self.per_caller = per_caller
        self.most = most
        self.setting = setting  # the [limits] setting that raises per_caller
        self.held = 0
        self._by_caller: dict[str, int] = {}

    def take(self, caller: str | None) -> Hold:
        """A hold for ``caller``; past a cap (nothing taken then) ``TooManyHeld`` (429) for
        the caller's, ``NodeFull`` (503) for the node's."""
        if self.held >= self.most:
            log.warning("holds full what=%r held=%d", self.what, self.held)
            raise NodeFull(
                f"this node has {self.most} {self.what} open, as many as its connection "
                "slots allow (beside those kept for health checks and peers); try another "
                "node, or later (an operator raises [limits] max_connections)",
                limit="max_connections",
            )
        if caller is not None:
            mine = self._by_caller.get(caller, 0)
            if mine >= self.per_caller:
                log.info("holds refused what=%r caller=%s held=%d", self.what, caller, mine)
                raise TooManyHeld(
                    f"you have {mine} {self.what} open on this node, the most one caller may "
                    f"([limits] {self.setting} = {self.per_caller}); close one first, or ask "
                    f"the operator to raise {self.setting}",
                    limit=self.setting,
                )
            self._by_caller[caller] = mine + 1
        self.held += 1
        return Hold(self, caller)

    def _give_back(self, caller: str | None) -> None:
        self.held -= 1
        if caller is not None:
            mine = self._by_caller[caller] - 1
            if mine:
                self._by_caller[caller] = mine
            else:
                del self._by_caller[caller]  # an idle caller costs nothing

    def held_by(self, caller: str) -> int:
        return self._by_caller.get(caller, 0)

    def callers(self) -> int:
        return len(self._by_caller)


class Hold:
    """One open request's place; ``release`` gives it back, once however often called."""

    __slots__ = ("_caller", "_holds")

    def __init__(self, holds: Holds, caller: str | None) -> None:
        self._holds: Holds | None = holds
        self._caller = caller

    def release(self) -> None:
        holds, self._holds = self._holds, None
        if holds is not None:
            holds._give_back(self._caller)

    @property
    def released(self) -> bool:
        return self._holds is None


class Held:
    """A limited route's handler behind its caller's request cap (a Starlette middleware,
    as ``limits.Limit``, after the rule that verified the caller): the hold lasts as long
    as the handler runs, a stream's whole life included, and is given back however it ends
    (an answer, an error, the client going)."""

    __slots__ = ("_app", "_holds")

    def __init__(self, app: Asgi, holds: Holds) -> None:
        self._app = app
        self._holds = holds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hold = self._holds.take(caller_of(scope))
        try:
            await self._app(scope, receive, send)
        finally:
            hold.release()

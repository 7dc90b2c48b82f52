"""Probing a peer the router avoids for not answering, until it answers again.

The hedger (``hedging.py``) tells of a target that lost a race without answering at
all; once the router has heard that of it often enough to avoid it, nothing would be
sent to it any more, so nothing would show it is back. It is asked
``GET /v1/health/live`` every ``PROBE_INTERVAL_S`` instead (through the sender, on the
open path: no credential spent), and the router hears of its first answer.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from kiq.metrics import HedgeStats
from kiq.peers.sender import Sender

# A peer avoided for not answering is asked every PROBE_INTERVAL_S whether it is back.
PROBE_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 0.5


class Avoidance(Protocol):
    """The router's record of peers that stopped answering (``kiq.routing.Router``)."""

    def succeeded(self, url: str) -> None: ...

    def unanswered(self, url: str) -> bool: ...

    def suspect(self, url: str) -> bool: ...


class Probes:
    """One probe per avoided peer, while the router avoids it."""

    def __init__(self, router: Avoidance, sender: Sender, stats: HedgeStats) -> None:
        self._router = router
        self._sender = sender
        self._stats = stats
        self._probes: dict[str, asyncio.Task[None]] = {}

    def unanswered(self, target: str) -> None:
        """``target`` lost a race without answering: probed once the router avoids it."""
        if not self._router.unanswered(target) or target in self._probes:
            return
        self._stats.suspected += 1
        probe = asyncio.get_running_loop().create_task(self._probe(target))
        self._probes[target] = probe
        probe.add_done_callback(lambda _: self._probes.pop(target, None))

    def close(self) -> None:
        for probe in list(self._probes.values()):
            probe.cancel()

    async def _probe(self, target: str) -> None:
        """Until the avoided ``target`` answers (anything: it is alive), or others hear it."""
        while self._router.suspect(target):
            await asyncio.sleep(PROBE_INTERVAL_S)
            self._stats.probes += 1
            if await self._sender.alive(target, PROBE_TIMEOUT_S):
                self._router.succeeded(target)

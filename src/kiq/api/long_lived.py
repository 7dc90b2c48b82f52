"""Keeps what open event streams hold out of the collector's full passes.

An open stream holds about 70 objects the collector tracks (its route's coroutines
waiting for the client to go, its writer task, timers, its subscription). With 10,000
streams a full collection walked about 600,000 of them for 410-560 ms of the event loop
and freed nothing (``kiq bench watch``, docs/benchmarks.md): every event and request
waited behind it. Objects that live as long as a stream are what ``gc.freeze()`` is for.

So once ``LEAST`` streams are open, each time their number has grown by a quarter since
the last freeze, the young generations are collected and everything tracked is frozen
(moved where full passes do not look). A frozen object that becomes garbage is still
freed by its reference count; only one caught in a cycle waits, so once as many streams
have ended as half of those open at the last freeze, everything is thawed, collected in
one full pass and frozen again: the pause comes once per half turnover of the streams,
not whenever the collector's own count says.
"""

from __future__ import annotations

import gc
from typing import Protocol

LEAST = 1_000  # streams open before freezing is worth it (a full pass below: tens of ms)
GROWTH = 1.25  # frozen again once the open streams grew by this much since the last freeze
TURNOVER = 0.5  # thawed once this share of the streams open at the last freeze ended


class Collector(Protocol):
    def collect(self, generation: int = 2) -> int: ...
    def freeze(self) -> None: ...
    def unfreeze(self) -> None: ...


class LongLived:
    """Counts the streams open on this process's loop and freezes or thaws around them."""

    def __init__(self, collector: Collector = gc) -> None:
        self._gc = collector
        self.open = 0
        self._frozen_at = 0  # streams open at the last freeze; 0: none frozen by this
        self._ended = 0  # streams ended since then

    def opened(self) -> None:
        self.open += 1
        if self.open >= LEAST and self.open >= self._frozen_at * GROWTH:
            self._freeze()

    def closed(self) -> None:
        self.open -= 1
        if not self._frozen_at:
            return
        self._ended += 1
        if self._ended >= self._frozen_at * TURNOVER:
            self._gc.unfreeze()
            self._gc.collect()  # the cycles of the streams that ended, in one full pass
            if self.open >= LEAST:
                self._freeze()
            else:
                self._frozen_at = self._ended = 0
                self._gc.freeze()  # what the node froze at start-up, as it left it

    def _freeze(self) -> None:
        self._gc.collect(1)  # the young garbage first: it would never be freed once frozen
        self._gc.freeze()
        self._frozen_at, self._ended = self.open, 0


STREAMS = LongLived()

"""Taps' batches handed to the event loop together, at most once per interval.

A materializer applies what it fetched as soon as it has it: at a thousand records a
second that is a batch every millisecond or two. Handed over one at a time, each batch
woke the event loop, then the streams it reached, then the server's I/O thread to write
them: one full round of wake-ups per record, which cost more than the events themselves
(``scripts/bench_sse_floor.py``: 123 µs of a bare ASGI server's CPU an event sent a
millisecond apart, 30 µs with the same events sent 10 ms' worth at a time; ``kiq bench
watch``: 147 µs beyond ingest before, 51-58 after). So the first batch
after a quiet interval goes at once, and what follows within the interval waits for
its end and goes with the rest: a change waits at most ``interval_s`` more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable

from kiq.replicas.taps import Tap
from kiq.stores.base import Change

log = logging.getLogger(__name__)

DELIVERY_INTERVAL_S = 0.010

Applied = Callable[[int, list[Change], frozenset[int]], None]


class Deliveries:
    """Batches from any materializer thread, delivered on ``loop`` in the order they came.

    The threads only append to a list and, once per interval, ask the loop to deliver
    (``call_soon_threadsafe``); a list append and a flag's write are atomic under the GIL,
    and a thread appends before it reads the flag, so no batch is left waiting unasked."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, interval_s: float = DELIVERY_INTERVAL_S
    ) -> None:
        self._loop = loop
        self._interval = interval_s
        self._queued: list[tuple[Applied, int, list[Change], frozenset[int]]] = []
        self._asked = False  # a delivery is asked for or scheduled, and has not begun
        self._last = -math.inf  # when the last delivery began (the loop's clock)

    def tap(self, applied: Applied) -> Tap:
        """A tap (run on a materializer thread) whose batches reach ``applied`` on the loop."""

        def tap(through: int, changes: list[Change], expired: frozenset[int]) -> None:
            self._queued.append((applied, through, changes, expired))
            if not self._asked:
                self._asked = True
                with contextlib.suppress(RuntimeError):  # the loop closed: the node is stopping
                    self._loop.call_soon_threadsafe(self._schedule)

        return tap

    def _schedule(self) -> None:
        wait = self._last + self._interval - self._loop.time()
        if wait > 0:
            self._loop.call_later(wait, self._deliver)
        else:
            self._deliver()

    def _deliver(self) -> None:
        self._asked = False  # before taking the list: a batch appended after asks again
        queued, self._queued = self._queued, []
        self._last = self._loop.time()
        for applied, through, changes, expired in queued:
            try:
                applied(through, changes, expired)
            except Exception:
                log.exception("watch delivery failed; the other feeds' batches go on")

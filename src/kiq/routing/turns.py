"""Turns for scan work: what a node's event loop spends on pages between two looks at its sockets.

A point lookup is one store read; a page of a range, a top or an index is hundreds, and
a range over every partition is one such read per partition, started at once. Run as
they come, four clients paging through a table keep the event loop in store reads for
tens of milliseconds at a time, and every lookup queued behind them waits that long.

So a page is read in slices (``SLICE_ROWS`` rows of one partition, or one top or index
page), each after ``await turns()``. A loop iteration runs slices until they have taken
``budget_s``; the next slice waits for a later iteration, after the loop has polled its
sockets and run what they brought (the lookups). Waiting slices go first come, first
served, one iteration each, so a large scan cannot starve a small one. A lone scan pays
one loop iteration per ``budget_s`` of its work.

A small bounded page (``SMALL_PAGE`` rows of a partition at most, ``api/paced.py``) runs
``unpaced``: its slices take no turns. It is a slice or a few, less work than a multiget,
and each turn it waited for was a loop iteration of everything else's work added to it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar

# Rows one slice of a range reads from a store: about 0.1 ms of a RocksDB scan.
SLICE_ROWS = 128
# Scan work one event-loop iteration runs before the sockets are looked at again.
BUDGET_S = 0.0005
# While lookups are being answered, scan pages take at most this share of the time: at
# half, four pagers still took 60% of a one-core node (their answers' sending too) and
# the lookups' p99 doubled; at 0.3 they kept 64% of their throughput (`kiq bench scans`).
SHARE = 0.3
# The most rows of a partition a small bounded page reads: it runs ``unpaced`` (and passes
# the ScanGate, api/paced.py).
SMALL_PAGE = 100

_UNPACED: ContextVar[bool] = ContextVar("kiq_unpaced", default=False)


@contextmanager
def unpaced() -> Iterator[None]:
    """The slices of the page read within (this task and those it starts) take no turns."""
    token = _UNPACED.set(True)
    try:
        yield
    finally:
        _UNPACED.reset(token)


class Turns:
    """The slices of every scan of one event loop, paced by ``budget_s`` per iteration."""

    __slots__ = ("_began", "_budget", "_clock", "_scheduled", "_waiting")

    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self._budget = budget_s
        self._clock = time.perf_counter
        self._began: float | None = None  # when this iteration's first slice started
        self._scheduled = False  # the turn's end is queued on the loop
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def __call__(self) -> None:
        """Returns when the caller may run one slice (at once when ``unpaced``)."""
        if _UNPACED.get():
            return
        began = self._began
        if not self._waiting:
            if began is None:
                self._start()
                return
            if self._clock() - began < self._budget:
                return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._next()  # it was given the turn: pass it on
            else:
                self._waiting.remove(waiter)
            raise
        self._start()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _start(self) -> None:
        self._began = self._clock()
        if not self._scheduled:
            self._scheduled = True
            # Runs in the loop's next iteration, after it polled its sockets: the slice
            # then given the turn runs in the one after, behind what the sockets brought.
            asyncio.get_running_loop().call_soon(self._next)

    def _next(self) -> None:
        self._scheduled = False
        self._began = None
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class ScanGate:
    """Scan pages of one process one at a time, first come, first served; while lookups are
    being answered, pages take at most ``share`` of the time.

    Slices bound how long a page holds the event loop at once, but a page is work all the
    same: four clients paging flat out keep a core busy, and on a busy core the server's
    own threads (those that read the lookups off their sockets) wait their turn too. So a
    page that saw lookups answered while it ran (``served`` moved) keeps the next page
    waiting, by ``share``: with 0.3 a page of 1 ms rests 2.3 ms. Scans yield most of the
    time to lookups when there are any, and run flat out when there are none.
    """

    __slots__ = ("_free_at", "_lock", "_rest", "_served")

    def __init__(self, served: Callable[[], int], share: float = SHARE) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self._served = served  # how many lookups this process has answered, ever
        self._rest = (1 - share) / share
        self._lock = asyncio.Lock()
        self._free_at = 0.0

    @asynccontextmanager
    async def page(self) -> AsyncIterator[None]:
        async with self._lock:
            wait = self._free_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            seen = self._served()
            started = time.monotonic()
            try:
                yield
            finally:
                now = time.monotonic()
                busy = self._served() != seen
                self._free_at = now + (now - started) * self._rest if busy else now

"""Hedged forwarding: a lookup the first replica is slow to answer goes to the next one too.

A node that stalls (stopped, paused, swapping) accepts connections and answers
nothing, so a forwarded lookup to it used to wait the whole forward timeout
before its next replica was asked. Now, when the first target has not answered
within the *hedge delay*, the same lookup goes to the next target and the first
usable answer (200 or 404) wins; the other is left to finish unread. A target
that answers ``FAILED`` or refuses (421, 503) hands over at once, as before.
When the next target is this node's own replica, the race ends and the caller
answers from it.

The delay is a high percentile (``forward_hedge_percentile``) of the latencies
the first targets of recent lookups had, between a floor and a cap: so hedges
stay about ``100 - percentile`` % of forwarded lookups whatever the load, and a
stalled node costs at most the cap. Lookups that may wait for ``min_offset``
are never hedged (their slowness is asked for). Stalls on a loaded machine are
correlated (every lookup in flight waits at once), so hedges are also held to a
budget: at most ``BUDGET`` of the forwarded lookups, with a burst of ``BURST``
so that the first lookups to a node that just stalled are hedged. A target that
loses races without answering at all is reported to the router, which avoids it
until it answers again (``Router.unanswered``; ``Peers`` probes it meanwhile).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiq.metrics import HedgeStats
from kiq.routing.router import LOCAL
from kiq.routing.wire import FAILED, HEDGED, Lookup, LookupResult

if TYPE_CHECKING:
    from kiq.routing.batcher import LookupBatcher
    from kiq.settings import ServeSettings

WINDOW = 512  # latencies kept
BUDGET = 0.1  # hedges per forwarded lookup, at most, over time
BURST = 20.0  # hedges that may go at once when the budget has been saved up
RECOMPUTE_EVERY = 256  # samples between two computations of the delay (a sort)


@dataclass(frozen=True)
class HedgePolicy:
    """When to hedge: the percentile of recent first-target latencies, floored and capped."""

    percentile: float = 99.0
    floor_ms: int = 10
    cap_ms: int = 100  # 0: never hedge

    @classmethod
    def of(cls, settings: ServeSettings) -> HedgePolicy:
        return cls(
            settings.forward_hedge_percentile,
            settings.forward_hedge_floor_ms,
            settings.forward_hedge_cap_ms,
        )

    @property
    def enabled(self) -> bool:
        return self.cap_ms > 0


class HedgeDelay:
    """The current hedge delay, from a sliding window of first-target latencies.

    Recorded per answer, recomputed every ``RECOMPUTE_EVERY`` answers (a sort of
    ``WINDOW`` floats), so a lookup only reads ``seconds``. With no samples yet
    the delay is the cap: no hedge before kiq knows what slow means.
    """

    __slots__ = ("_cap", "_floor", "_index", "_rank", "_samples", "_since", "seconds")

    def __init__(self, policy: HedgePolicy) -> None:
        self._floor = policy.floor_ms / 1000
        self._cap = max(policy.cap_ms / 1000, self._floor)
        self._rank = min(max(policy.percentile, 0.0), 100.0) / 100
        self._samples: list[float] = []
        self._index = 0
        self._since = 0
        self.seconds = self._cap

    def record(self, seconds: float) -> None:
        samples = self._samples
        if len(samples) < WINDOW:
            samples.append(seconds)
        else:
            samples[self._index] = seconds
            self._index = (self._index + 1) % WINDOW
        self._since += 1
        if self._since >= RECOMPUTE_EVERY or len(samples) == 32:
            self._since = 0
            ordered = sorted(samples)
            value = ordered[min(int(self._rank * len(ordered)), len(ordered) - 1)]
            self.seconds = min(max(value, self._floor), self._cap)


class Hedger:
    """Starts hedged lookups over a batcher; one per ``Peers``."""

    def __init__(
        self,
        batcher: LookupBatcher,
        policy: HedgePolicy,
        stats: HedgeStats,
        unanswered: Callable[[str], None],  # a target lost a race without answering
    ) -> None:
        self.batcher = batcher
        self.enabled = policy.enabled
        self.delay = HedgeDelay(policy)
        self.stats = stats
        self.unanswered = unanswered
        self.tokens = BURST  # hedges allowed now; each forwarded lookup adds BUDGET
        stats.delay = self.delay
        # Races waiting for their hedge delay, about in deadline order (the delay
        # moves slowly), and one timer for the earliest: a timer per lookup
        # would cost more than the rest of the race together.
        self._waiting: deque[LookupRace] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def race(
        self, targets: list[str], start: int, lookup: Lookup, caller: str | None
    ) -> LookupRace:
        """The lookup sent to ``targets[start]``, hedged over the remote targets that follow."""
        return LookupRace(self, targets, start, lookup, caller)

    def arm(self, race: LookupRace, now: float) -> None:
        """``race._due()`` once the hedge delay from ``now`` has passed, unless done by then."""
        race.deadline = now + self.delay.seconds
        self._waiting.append(race)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.delay.seconds, self._sweep)

    def _sweep(self) -> None:
        now = time.perf_counter()
        waiting = self._waiting
        while waiting:  # races hedged here arm again: no timer of their own, as one is set
            race = waiting[0]
            if race.deadline > now and not race.done():
                break
            waiting.popleft()
            if not race.done():
                race._due(now)
        self._timer = None
        if waiting:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(waiting[0].deadline - now, self._sweep)


class LookupRace:
    """One forwarded lookup over consecutive remote targets; ``await`` it for the answer.

    Its result is the first 200/404, else the last refusal or failure; ``end`` is
    the index of the first target it did not cover (``LOCAL`` or the end of the
    list), where the caller goes on. A race that found the next target to be
    ``LOCAL`` when its delay ran out ends with a ``HEDGED`` result saying so.
    """

    deadline: float  # when the hedge delay runs out, once armed

    __slots__ = (
        "_future",
        "_hedged",
        "_hedger",
        "_out",
        "_primary_out",
        "_sent",
        "caller",
        "deadline",
        "end",
        "lookup",
        "next",
        "primary",
        "targets",
    )

    def __init__(
        self,
        hedger: Hedger,
        targets: list[str],
        start: int,
        lookup: Lookup,
        caller: str | None,
    ) -> None:
        self._hedger = hedger
        self.targets = targets
        self.lookup = lookup
        self.caller = caller
        end = start + 1
        n = len(targets)
        while end < n and targets[end] != LOCAL:
            end += 1
        self.end = end
        self.next = start
        self.primary = targets[start]
        self._out = 0  # lookups of this race out, unanswered
        self._primary_out = True
        self._hedged = False
        self._future: asyncio.Future[LookupResult] = asyncio.get_running_loop().create_future()
        self._sent = sent = time.perf_counter()
        hedger.stats.lookups += 1
        if hedger.tokens < BURST:
            hedger.tokens += BUDGET
        self._send()
        waits = lookup.min_offset is not None and lookup.wait_ms > 0
        if hedger.enabled and (end - start > 1 or end < n) and not waits:
            hedger.arm(self, sent)

    def __await__(self) -> Generator[Any, None, LookupResult]:
        return self._future.__await__()

    def done(self) -> bool:
        return self._future.done()

    def _send(self) -> None:
        target = self.targets[self.next]
        self.next += 1
        self._out += 1
        self._hedger.batcher.submit(target, self.lookup, self.caller, self)

    def deliver(self, target: str, result: LookupResult) -> None:
        self._out -= 1
        status = result.status
        if target == self.primary:
            self._primary_out = False
            if status != FAILED:
                self._hedger.delay.record(time.perf_counter() - self._sent)
        if self._future.done():
            return  # a hedge answered first, or the caller went away
        if status == 200 or status == 404:
            self._finish(result, target)
            return
        # Refused or failed: the next target, unless one is out already.
        if not self._out:
            if self.next < self.end:
                self._send()
            else:
                self._finish(result, None)

    def _due(self, now: float) -> None:
        """The hedge delay ran out with no usable answer: one more target, or the local one."""
        hedger = self._hedger
        stats = hedger.stats
        if hedger.tokens < 1:
            stats.skipped += 1  # over budget: asks again after another delay
            hedger.arm(self, now)
            return
        hedger.tokens -= 1
        if self.next < self.end:
            stats.hedged += 1
            self._hedged = True
            self._send()
            hedger.arm(self, now)
        elif self.end < len(self.targets):
            stats.hedged += 1
            stats.to_local += 1
            self._hedged = True
            ms = round(self._hedger.delay.seconds * 1000)
            self._finish(LookupResult(HEDGED, reason=f"no answer within {ms} ms"), LOCAL)

    def _finish(self, result: LookupResult, winner: str | None) -> None:
        if winner is not None and winner != self.primary:
            if self._hedged:
                self._hedger.stats.won += 1
            if self._primary_out:  # it never answered: maybe it never will
                self._hedger.unanswered(self.primary)
        elif winner is not None and self._hedged:
            self._hedger.stats.lost += 1
        self._future.set_result(result)

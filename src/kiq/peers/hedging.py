"""Hedged forwarding: a lookup the first replica is slow to answer goes to the next one too.

A node that stalls (stopped, paused, swapping) accepts connections and answers
nothing, so a forwarded lookup to it used to wait the whole forward timeout
before its next replica was asked. Now, when the first target has not answered
within the *hedge delay*, the same lookup goes to the next target and the first
usable answer (found or missing) wins; the other is left to finish unread. A target
that fails or refuses (any other outcome) hands over at once, as before.
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
until it answers again (``Router.unanswered``; ``probes.py`` probes it meanwhile).

The hedger is the stage after ``Peers.forward`` and before the batcher it is built
with: it hands each lookup on (``submit``) and hears the answers back through the
race it gave with it (``LookupRace.deliver``), never through a callback of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kiq.metrics import HedgeStats
from kiq.peers.wire import LOCAL, Lookup, LookupResult, Outcome

if TYPE_CHECKING:
    from kiq.settings import ServeSettings

FOUND, MISSING, FAILED, HEDGED = Outcome.FOUND, Outcome.MISSING, Outcome.FAILED, Outcome.HEDGED

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


class Submits(Protocol):
    """The next stage: ``LookupBatcher`` (``batcher.py``), or a stand-in in tests."""

    def submit(
        self, target_url: str, lookup: Lookup, caller: str | None, waiter: LookupRace
    ) -> None:
        """Queues ``lookup`` for the target; ``waiter.deliver`` is told its answer."""


class Suspects(Protocol):
    """Hears of a target that lost a race without answering: ``Probes`` (``probes.py``)."""

    def unanswered(self, target: str) -> None: ...


class Hedger:
    """Runs forwarded lookups as races over their replicas; one per ``Peers``.

    It owns its races: starts each (``race``), hears every answer a target gives
    (``LookupRace.deliver`` hands it over), sends the next target a refused or failed
    lookup, hedges a race whose delay ran out, and ends it on the first usable answer.
    ``batcher`` queues one lookup for one target; ``suspects`` hears of a target that
    lost a race without answering at all.
    """

    def __init__(
        self,
        batcher: Submits,
        policy: HedgePolicy,
        stats: HedgeStats,
        suspects: Suspects,
    ) -> None:
        self._send = batcher.submit
        self._enabled = policy.enabled
        self.delay = HedgeDelay(policy)
        self.stats = stats
        self._unanswered = suspects.unanswered
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
        race = LookupRace(self, targets, start, lookup, caller)
        self.stats.lookups += 1
        if self.tokens < BURST:
            self.tokens += BUDGET
        self._next(race)
        waits = lookup.min_offset is not None and lookup.wait_ms > 0
        end = race.end
        if self._enabled and (end - start > 1 or end < len(targets)) and not waits:
            self._arm(race, race.sent)
        return race

    def _next(self, race: LookupRace) -> None:
        """Sends the race's lookup to its next target."""
        target = race.targets[race.next]
        race.next += 1
        race.out += 1
        self._send(target, race.lookup, race.caller, race)

    def _answered(self, race: LookupRace, target: str, result: LookupResult) -> None:
        race.out -= 1
        outcome = result.outcome
        if target == race.primary:
            race.primary_out = False
            if outcome is not FAILED:
                self.delay.record(time.perf_counter() - race.sent)
        if race.done():
            return  # a hedge answered first, or the caller went away
        if outcome is FOUND or outcome is MISSING:
            self._finish(race, result, target)
            return
        # Refused or failed: the next target, unless one is out already.
        if not race.out:
            if race.next < race.end:
                self._next(race)
            else:
                self._finish(race, result, None)

    def _arm(self, race: LookupRace, now: float) -> None:
        """``_due(race)`` once the hedge delay from ``now`` has passed, unless done by then."""
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
                self._due(race, now)
        self._timer = None
        if waiting:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(waiting[0].deadline - now, self._sweep)

    def _due(self, race: LookupRace, now: float) -> None:
        """The race's delay ran out with no usable answer: one more target, or the local one."""
        stats = self.stats
        if self.tokens < 1:
            stats.skipped += 1  # over budget: asks again after another delay
            self._arm(race, now)
            return
        self.tokens -= 1
        if race.next < race.end:
            stats.hedged += 1
            race.hedged = True
            self._next(race)
            self._arm(race, now)
        elif race.end < len(race.targets):
            stats.hedged += 1
            stats.to_local += 1
            race.hedged = True
            ms = round(self.delay.seconds * 1000)
            self._finish(race, LookupResult(HEDGED, reason=f"no answer within {ms} ms"), LOCAL)

    def _finish(self, race: LookupRace, result: LookupResult, winner: str | None) -> None:
        if winner is not None and winner != race.primary:
            if race.hedged:
                self.stats.won += 1
            if race.primary_out:  # it never answered: maybe it never will
                self._unanswered(race.primary)
        elif winner is not None and race.hedged:
            self.stats.lost += 1
        race.future.set_result(result)


class LookupRace:
    """One forwarded lookup over consecutive remote targets; ``await`` it for the answer.

    Its result is the first found or missing answer, else the last refusal or
    failure; ``end`` is the index of the first target it did not cover (``LOCAL`` or
    the end of the list), where the caller goes on. A race that found the next
    target to be ``LOCAL`` when its delay ran out ends with a ``HEDGED`` result
    saying so. Its ``Hedger`` moves it along; the race only holds where it stands.
    """

    deadline: float  # when the hedge delay runs out, once armed

    __slots__ = (
        "_hedger",
        "caller",
        "deadline",
        "end",
        "future",
        "hedged",
        "lookup",
        "next",
        "out",
        "primary",
        "primary_out",
        "sent",
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
        self.next = start  # the index of the next target to send to
        self.primary = targets[start]
        self.out = 0  # lookups of this race out, unanswered
        self.primary_out = True
        self.hedged = False
        self.future: asyncio.Future[LookupResult] = asyncio.get_running_loop().create_future()
        self.sent = time.perf_counter()

    def __await__(self) -> Generator[Any, None, LookupResult]:
        return self.future.__await__()

    def done(self) -> bool:
        return self.future.done()

    def deliver(self, target: str, result: LookupResult) -> None:
        """A target's answer (``batcher.Waiter``): the hedger decides what follows."""
        self._hedger._answered(self, target, result)

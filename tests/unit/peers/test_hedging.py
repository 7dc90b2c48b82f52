"""Hedged forwarding (``Peers.forward``): slow first replicas, avoided peers, probes.

Against real loopback servers: one that answers at once, one that answers after
a delay, one that stalls (accepts, never answers) until told to resume.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import pytest

from kiq.cluster import ClusterView, Member, PartitionReplicas
from kiq.metrics import HedgeStats
from kiq.peers import LookupResult, Outcome, Peers
from kiq.peers import probes as probes_module
from kiq.peers.hedging import HedgeDelay, HedgePolicy, Hedger, LookupRace
from kiq.peers.wire import HEALTH_LIVE, MSGPACK, Lookup, decode_lookups, encode
from kiq.routing import LOCAL, Router
from kiq.routing.router import SUSPECT_AFTER
from tests.unit.peers.servers import Answer, Request, serving

POLICY = HedgePolicy(percentile=99, floor_ms=20, cap_ms=60)  # no samples yet: 60 ms


@dataclass
class Replica:
    """A peer answering lookups with its own name as the value, after ``delay_s``."""

    name: bytes
    delay_s: float = 0.0
    resumed: asyncio.Event = field(default_factory=asyncio.Event)
    stalled: bool = False
    lookups: int = 0
    probes: int = 0

    async def __call__(self, request: Request) -> Answer:
        if self.stalled:
            await self.resumed.wait()
        if request.path == HEALTH_LIVE:
            self.probes += 1
            return Answer(200, b"{}")
        items = decode_lookups(request.body)
        self.lookups += len(items)
        if any(item.wait_ms for item in items):
            await asyncio.sleep(max(item.wait_ms for item in items) / 1000)
        await asyncio.sleep(self.delay_s)
        results = [LookupResult(Outcome.FOUND, 0, 0, False, self.name, 1, self.name) for _ in items]
        return Answer(200, encode(results), [("content-type", MSGPACK)])


def run(
    scenario: Callable[[list[str], Peers, list[Replica]], Awaitable[None]],
    replicas: Callable[[], list[Replica]],
    router: Router | None = None,
    policy: HedgePolicy = POLICY,
) -> HedgeStats:
    stats = HedgeStats()

    async def main() -> None:
        made = replicas()  # inside the loop: their events belong to it
        async with AsyncExitStack() as stack:
            urls = [(await stack.enter_async_context(serving(r))).url for r in made]
            peers = Peers(
                "n1",
                router or Router("n1"),
                2000,
                hedging=policy,
                hedge_stats=stats,
                channels=False,  # each batch an HTTP request these servers see
            )
            stack.callback(peers.close)
            await scenario(urls, peers, made)
            for r in made:
                r.resumed.set()  # let stalled handlers finish before the servers close

    asyncio.run(main())
    return stats


def order(router: Router, urls: list[str]) -> list[str]:
    """The router's order for a partition whose active is at urls[0], standby at urls[1]."""
    view = ClusterView(
        version=1,
        members={"a": Member("a", urls[0]), "b": Member("b", urls[1])},
        replicas={("t", 0): PartitionReplicas("a", ("b",))},
    )
    return router.targets(view, "t", 0, None)


async def forward(peers: Peers, targets: list[str], key: bytes = b"k", wait_ms: int = 0):
    race = peers.forward(targets, 0, "t", key, None, 1 if wait_ms else None, wait_ms, None)
    started = time.monotonic()
    result = await race
    return result, race.end, time.monotonic() - started


def test_a_fast_first_replica_is_never_hedged() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        for i in range(50):
            result, end, _ = await forward(peers, urls, f"k{i}".encode())
            assert (result.outcome, result.served_by, end) == (Outcome.FOUND, b"a", 2)
        assert replicas[1].lookups == 0

    # A delay well above any hiccup of a loaded test machine: this test is about load.
    relaxed = HedgePolicy(percentile=99, floor_ms=300, cap_ms=600)
    stats = run(scenario, lambda: [Replica(b"a"), Replica(b"b")], policy=relaxed)
    assert (stats.lookups, stats.hedged, stats.won, stats.lost) == (50, 0, 0, 0)


def test_a_slow_first_replica_is_hedged_after_the_delay_and_the_hedge_wins() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        result, _, took = await forward(peers, urls)
        assert result.served_by == b"b"
        assert 0.055 <= took < 0.5  # the cap (no samples yet), not the 1 s the first takes
        assert replicas[1].lookups == 1

    stats = run(scenario, lambda: [Replica(b"a", delay_s=1.0), Replica(b"b")])
    assert (stats.hedged, stats.won, stats.lost) == (1, 1, 0)


def test_each_delay_that_runs_out_brings_in_one_more_replica() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        results = await asyncio.gather(*(forward(peers, urls, f"k{i}".encode()) for i in range(5)))
        for result, _, took in results:
            assert result.served_by == b"c"
            assert 0.115 <= took < 0.6  # two delays of 60 ms
        assert [r.lookups for r in replicas] == [5, 5, 5]

    stats = run(
        scenario, lambda: [Replica(b"a", delay_s=1.0), Replica(b"b", delay_s=1.0), Replica(b"c")]
    )
    assert (stats.lookups, stats.hedged, stats.won) == (5, 10, 5)


def test_the_first_replica_still_wins_when_it_answers_before_the_hedge() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        result, _, _ = await forward(peers, urls)
        assert result.served_by == b"a"

    stats = run(scenario, lambda: [Replica(b"a", delay_s=0.09), Replica(b"b", delay_s=0.5)])
    assert (stats.hedged, stats.won, stats.lost) == (1, 0, 1)


def test_hedges_over_the_budget_are_not_sent() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        peers._hedger.tokens = 0.0  # the budget spent
        result, _, took = await forward(peers, urls)
        assert result.served_by == b"a"
        assert took >= 0.3
        assert replicas[1].lookups == 0

    stats = run(scenario, lambda: [Replica(b"a", delay_s=0.3), Replica(b"b")])
    assert stats.hedged == 0
    assert stats.skipped >= 2  # asked again after each delay


def test_a_failing_first_replica_hands_over_at_once_without_a_hedge() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        result, _, took = await forward(peers, [dead, urls[0]])
        assert result.served_by == b"b"
        assert took < 0.055  # before any hedge delay ran out

    stats = run(scenario, lambda: [Replica(b"b")])
    assert stats.hedged == 0


def test_when_the_next_target_is_local_the_race_ends_for_the_caller_to_answer() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        result, end, took = await forward(peers, [urls[0], LOCAL, urls[1]])
        assert (result.outcome, end) == (Outcome.HEDGED, 1)
        assert "no answer within 60 ms" in result.reason
        assert took < 0.5

    stats = run(scenario, lambda: [Replica(b"a", delay_s=1.0), Replica(b"c")])
    assert (stats.hedged, stats.to_local, stats.won) == (1, 1, 1)


def test_lookups_that_wait_for_an_offset_are_not_hedged() -> None:
    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        result, _, took = await forward(peers, urls, wait_ms=200)
        assert result.served_by == b"a"
        assert took >= 0.2
        assert replicas[1].lookups == 0

    stats = run(scenario, lambda: [Replica(b"a"), Replica(b"b")])
    assert stats.hedged == 0


def test_a_stalled_peer_is_avoided_until_it_answers_a_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probes_module, "PROBE_INTERVAL_S", 0.05)
    router = Router("n1")

    async def scenario(urls: list[str], peers: Peers, replicas: list[Replica]) -> None:
        stalled = urls[0]
        for i in range(SUSPECT_AFTER):
            result, _, took = await forward(peers, urls, f"k{i}".encode())
            assert result.served_by == b"b" and took < 0.5
        assert router.suspect(stalled)
        assert order(router, urls) == [urls[1], stalled]
        await asyncio.sleep(0.3)
        assert router.suspect(stalled)  # probes go unanswered meanwhile
        replicas[0].stalled = False
        replicas[0].resumed.set()
        deadline = time.monotonic() + 2
        while router.suspect(stalled) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not router.suspect(stalled)
        assert replicas[0].probes >= 1
        assert order(router, urls) == urls

    stats = run(scenario, lambda: [Replica(b"a", stalled=True), Replica(b"b")], router)
    assert stats.suspected == 1
    assert stats.hedged == SUSPECT_AFTER
    assert stats.probes >= 1


class Submitted:
    """The hedger's next stage, standing in for the batcher: the lookups handed on."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, str | None, LookupRace]] = []

    def submit(
        self, target_url: str, lookup: Lookup, caller: str | None, waiter: LookupRace
    ) -> None:
        self.sent.append((target_url, lookup.key, caller, waiter))


class Unanswered:
    """Stands in for the probes: the targets that lost a race without answering."""

    def __init__(self) -> None:
        self.targets: list[str] = []

    def unanswered(self, target: str) -> None:
        self.targets.append(target)


def test_the_hedger_runs_its_races_over_any_next_stage() -> None:
    """No batcher, no network: a ``submit`` is all the hedger needs to reach a target."""
    batcher = Submitted()
    suspects = Unanswered()
    sent = batcher.sent
    unanswered = suspects.targets

    async def scenario() -> tuple[LookupResult, LookupResult, int]:
        hedger = Hedger(batcher, POLICY, HedgeStats(), suspects)
        refused = hedger.race(["a", "b", LOCAL], 0, Lookup("t", b"k"), "alice")
        refused.deliver("a", LookupResult(Outcome.MOVED, reason="not here"))
        found = LookupResult(Outcome.FOUND, 0, 0, False, b"b", 1, b"v")
        refused.deliver("b", found)
        slow = hedger.race(["c", "d"], 0, Lookup("t", b"j"), None)
        await asyncio.sleep(0.08)  # past the delay (the cap: no samples yet)
        slow.deliver("d", found)
        slow.deliver("c", LookupResult(Outcome.FAILED, reason="late"))  # after the race
        return await refused, await slow, refused.end

    first, second, end = asyncio.run(scenario())
    assert [(t, k, c) for t, k, c, _ in sent] == [
        ("a", b"k", "alice"),
        ("b", b"k", "alice"),  # refused: the next target at once
        ("c", b"j", None),
        ("d", b"j", None),  # hedged after the delay
    ]
    assert first.served_by == second.served_by == b"b" and end == 2
    assert unanswered == ["c"]  # lost a race without an answer


def test_the_delay_is_a_percentile_of_recent_latencies_between_floor_and_cap() -> None:
    delay = HedgeDelay(HedgePolicy(percentile=90, floor_ms=5, cap_ms=100))
    assert delay.seconds == 0.1  # nothing known yet: the cap
    for i in range(1000):
        delay.record(0.001 * (i % 100))  # 0..99 ms, evenly
    assert 0.088 <= delay.seconds <= 0.091
    for _ in range(1024):
        delay.record(0.0001)
    assert delay.seconds == 0.005  # the floor
    for _ in range(1024):
        delay.record(3.0)
    assert delay.seconds == 0.1  # the cap

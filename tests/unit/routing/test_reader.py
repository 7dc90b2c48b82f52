"""``ReplicaReader``: which replica a read goes to, and what it makes of their answers.

Peers are scripted here (what each target answers); ``test_reopen`` and
``test_batches`` in ``tests/unit/api`` read through real nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from kiq.cluster import ClusterView, Member, PartitionReplicas
from kiq.metrics import NodeMetrics
from kiq.peers import LookupResult, Outcome, PeerError
from kiq.peers.wire import Item, MultigetResult, ScanResult
from kiq.replicas import Replica, ReplicaState, Role
from kiq.routing import ReplicaReader, Router
from kiq.stores import MemoryPartitionStore

URL = {n: f"http://{n}.test" for n in ("a", "b", "c")}


class Race:
    def __init__(self, result: LookupResult, end: int) -> None:
        self.result, self.end = result, end

    def __await__(self) -> Generator[Any, None, LookupResult]:
        yield from asyncio.sleep(0).__await__()
        return self.result


@dataclass
class ScriptedPeers:
    """Each target's answer: a ``LookupResult``, a multiget's items, a page, or a failure."""

    lookups: dict[str, LookupResult] = field(default_factory=dict)
    multigets: dict[str, MultigetResult] = field(default_factory=dict)
    pages: dict[str, list[Item]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def forward(self, targets: list[str], i: int, *lookup: Any) -> Race:
        self.asked.append(targets[i])
        return Race(self.lookups[targets[i]], i + 1)

    async def multiget(self, target: str, table: str, keys: list[bytes], *rest: Any) -> Any:
        self.asked.append(target)
        if target not in self.multigets:
            raise PeerError(target, "unreachable")
        return self.multigets[target]

    async def scan(self, target: str, *scan: Any) -> ScanResult:
        self.asked.append(target)
        if target not in self.pages:
            raise PeerError(target, "answered 421", 421)
        return ScanResult(self.pages[target])


@dataclass
class Node:
    replicas: dict[tuple[str, int], Replica]
    view: ClusterView
    node_id: str = "b"
    metrics: NodeMetrics = field(default_factory=NodeMetrics)


def reader(
    peers: ScriptedPeers, local: ReplicaState | None = None, active: str = "a"
) -> ReplicaReader:
    """Partition 0 of ``t``: ``active`` first, then the others; this node is b."""
    standbys = tuple(n for n in ("a", "b", "c") if n != active)
    view = ClusterView(
        version=1,
        members={n: Member(n, URL[n]) for n in URL},
        replicas={("t", 0): PartitionReplicas(active, standbys)},
    )
    replicas = {}
    if local is not None:
        store = MemoryPartitionStore()
        store.apply([(b"k", b"here", 7)], 7)
        replica = Replica("t", "topic-t", 0, store, Role.STANDBY)
        replica.state, replica.end_offset = local, replica.position
        replicas[("t", 0)] = replica
    return ReplicaReader(Node(replicas, view), Router("b"), peers)


def found(by: str) -> LookupResult:
    return LookupResult(Outcome.FOUND, 0, 0, False, by.encode(), 1, b"there")


def test_a_local_active_replica_answers_before_any_peer():
    peers = ScriptedPeers()
    result = asyncio.run(reader(peers, ReplicaState.ACTIVE).lookup("t", 0, b"k"))
    assert (result.outcome, result.value, result.served_by) == (Outcome.FOUND, b"here", b"b")
    assert peers.asked == []
    assert reader(peers, ReplicaState.ACTIVE).elsewhere("t", 0) is None
    assert reader(peers, ReplicaState.STANDBY).elsewhere("t", 0) == URL["a"]


def test_the_owner_first_then_the_local_standby_then_the_rest():
    peers = ScriptedPeers({URL["a"]: LookupResult(Outcome.FAILED, reason="down")})
    result = asyncio.run(reader(peers, ReplicaState.STANDBY).lookup("t", 0, b"k"))
    assert (result.outcome, result.value, result.stale) == (Outcome.FOUND, b"here", True)
    assert peers.asked == [URL["a"]]


def test_a_refusal_goes_on_a_forbidden_caller_does_not():
    moved = LookupResult(Outcome.MOVED, reason="not here")
    peers = ScriptedPeers({URL["a"]: moved, URL["c"]: found("c")})
    assert asyncio.run(reader(peers).lookup("t", 0, b"k")).served_by == b"c"
    forbidden = LookupResult(Outcome.FORBIDDEN, reason="no")
    peers = ScriptedPeers({URL["a"]: forbidden, URL["c"]: found("c")})
    assert asyncio.run(reader(peers).lookup("t", 0, b"k")).outcome is Outcome.FORBIDDEN
    assert peers.asked == [URL["a"]]


def test_no_replica_answering_says_why_the_last_one_did_not():
    busy = LookupResult(Outcome.BUSY, reason="too many lookups wait for min_offset")
    peers = ScriptedPeers({URL["a"]: LookupResult(Outcome.FAILED), URL["c"]: busy})
    result = asyncio.run(reader(peers).lookup("t", 0, b"k"))
    assert result.outcome is Outcome.NO_REPLICA and result.partition == 0
    assert result.reason == f"a replica could not answer (busy): {busy.reason}"
    nobody = ReplicaReader(
        Node({}, ClusterView(1, {}, {})),
        Router("b"),
        ScriptedPeers(),
    )
    result = asyncio.run(nobody.lookup("t", 0, b"k"))
    assert (result.outcome, result.reason) == (
        Outcome.NO_REPLICA,
        "no replica of this partition is known",
    )


def test_a_multiget_takes_only_the_keys_it_asked_for_and_fails_over():
    forged = MultigetResult([(b"k", b"v"), (b"other", b"forged")], [])
    peers = ScriptedPeers(multigets={URL["c"]: forged})  # a: unreachable
    got, unanswered, _ = asyncio.run(reader(peers).get_many("t", {0: [b"k", b"absent"]}, None))
    assert (got, unanswered) == ({b"k": b"v"}, [])
    assert peers.asked == [URL["a"], URL["c"]]
    peers = ScriptedPeers(multigets={URL["a"]: MultigetResult([], refused=[0])})
    got, unanswered, _ = asyncio.run(reader(peers).get_many("t", {0: [b"k"]}, None))
    assert (got, unanswered) == ({}, [0])


def test_a_scan_goes_to_the_next_replica_and_none_when_none_answers():
    peers = ScriptedPeers(pages={URL["c"]: [(b"k", b"v")]})
    page = asyncio.run(reader(peers).scan("t", 0, None, None, 10, None))
    assert page is not None and page.items == [(b"k", b"v")]
    assert asyncio.run(reader(ScriptedPeers()).scan("t", 0, None, None, 10, None)) is None
    here = reader(ScriptedPeers(), ReplicaState.ACTIVE)
    page = asyncio.run(here.scan("t", 0, None, None, 10, None))
    assert page is not None and page.items == [(b"k", b"here")]


def _revoked_under_the_request(new_owner: str | None) -> tuple[LookupResult, list[str]]:
    """b owns partition 0 alone; its store closes (revoked) as a lookup reads it; the
    view that moves the partition to ``new_owner`` comes 50 ms later (None: never)."""
    peers = ScriptedPeers({URL["c"]: found("c")})
    read = reader(peers, ReplicaState.ACTIVE, active="b")
    node = read._node  # the stand-in node above
    assert isinstance(node, Node)
    only_b = ClusterView(2, node.view.members, {("t", 0): PartitionReplicas("b", ())})
    node.view = only_b
    replica = node.replicas[("t", 0)]

    async def scenario() -> LookupResult:
        replica.store.close()  # type: ignore[attr-defined]

        async def rebalance() -> None:
            await asyncio.sleep(0.01)
            del node.replicas[("t", 0)]
            if new_owner is not None:
                await asyncio.sleep(0.04)
                moved = PartitionReplicas(new_owner, ())
                node.view = ClusterView(3, only_b.members, {("t", 0): moved})

        task = asyncio.create_task(rebalance())
        result = await read.lookup("t", 0, b"k")
        await task
        return result

    return asyncio.run(scenario()), peers.asked


def test_a_replica_revoked_under_a_lookup_waits_for_the_view_that_says_where_it_went():
    result, asked = _revoked_under_the_request("c")
    assert (result.outcome, result.served_by) == (Outcome.FOUND, b"c")
    assert asked == [URL["c"]]


def test_with_no_new_view_it_says_the_replica_was_revoked(monkeypatch):
    from kiq.routing import reader as reader_module

    monkeypatch.setattr(reader_module, "VIEW_WAIT_S", 0.1)
    result, asked = _revoked_under_the_request(None)
    assert result.outcome is Outcome.NO_REPLICA and asked == []
    assert result.reason == "this node's replica was revoked during the request"


def test_forwarded_reads_are_counted_answered_or_not():
    peers = ScriptedPeers({URL["a"]: LookupResult(Outcome.FAILED), URL["c"]: found("c")})
    read = reader(peers)
    assert asyncio.run(read.lookup("t", 0, b"k")).served_by == b"c"
    forwards = read._node.metrics.forwards
    assert (forwards.ok, forwards.failed) == (1, 1)

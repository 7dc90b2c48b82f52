"""What a replica answers a relayed watch (``LocalReplicas.changes``), on a memory store."""

from __future__ import annotations

import asyncio

from kiq.peers.wire import Changes
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role
from kiq.routing.local import LocalReplicas
from kiq.stores import MemoryPartitionStore


def replica() -> Replica:
    store = MemoryPartitionStore()
    store.apply([(b"a", b"1", 0), (b"b", b"2", 1), (b"p:x", b"3", 2), (b"p:y", b"4", 3)], 3)
    r = Replica("t", "topic", 0, store, Role.ACTIVE)
    r.move_to(ReplicaState.ACTIVE)
    r.end_offset = r.position
    return r


def ask(r: Replica, asked: Changes):
    here = LocalReplicas("n1", {("t", 0): r})
    return asyncio.run(here.changes(asked))


def test_keys_that_differ_from_what_the_asker_knew():
    r = replica()
    known = [(b"a", 0), (b"b", -2), (b"gone", 7), (b"never", -1), (b"new", -2)]
    answer = ask(r, Changes("t", 0, known, [], -1, 0))
    assert answer.changed == [(b"b", b"2", 1), (b"gone", None, 3), (b"new", None, 3)]
    assert answer.source is not None and answer.source.applied_offset == 3
    assert answer.source.served_by == b"n1" and not answer.source.stale


def test_a_prefix_brings_the_keys_the_asker_lacks():
    r = replica()
    answer = ask(r, Changes("t", 0, [(b"p:x", 2)], [b"p:"], -1, 0))
    assert answer.changed == [(b"p:y", b"4", 3)]


def test_nothing_new_waits_for_the_next_write_then_answers():
    r = replica()

    async def scenario():
        here = LocalReplicas("n1", {("t", 0): r})
        waiting = asyncio.create_task(here.changes(Changes("t", 0, [(b"a", 0)], [], 3, 5_000)))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        r.store.apply([(b"a", b"9", 4)], 4)
        r.position = 5
        r.waits.reached(4)
        return await asyncio.wait_for(waiting, 2)

    answer = asyncio.run(scenario())
    assert answer.changed == [(b"a", b"9", 4)]


def test_no_replica_here_is_none():
    assert asyncio.run(LocalReplicas("n1", {}).changes(Changes("t", 0))) is None

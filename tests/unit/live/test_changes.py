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


def applies(r: Replica, rows: list[tuple[bytes, bytes | None, int]]) -> None:
    """The materializer's steps for a batch: stored, position moved, waits woken."""
    r.store.apply(rows, rows[-1][2])
    r.position = rows[-1][2] + 1
    r.waits.reached(rows[-1][2])


def waits_through(asked: Changes, batches: list[list[tuple[bytes, bytes | None, int]]]):
    """``asked`` of a replica that applies ``batches`` one by one while it waits: the answer,
    and how many batches had been applied when it came."""
    r = replica()

    async def scenario():
        here = LocalReplicas("n1", {("t", 0): r})
        waiting = asyncio.create_task(here.changes(asked))
        done = 0
        for rows in batches:
            await asyncio.sleep(0.02)
            if waiting.done():
                break
            applies(r, rows)
            done += 1
        return await asyncio.wait_for(waiting, 2), done

    return asyncio.run(scenario())


UNRELATED = [[(b"b", b"x", 4)], [(b"c", b"y", 5)], [(b"b", b"z", 6)]]


def test_writes_to_other_keys_are_not_answered_a_change_of_a_watched_key_is():
    batches = [*UNRELATED, [(b"a", b"9", 7)]]
    (answer, applied) = waits_through(Changes("t", 0, [(b"a", 0)], [], 3, 5_000), batches)
    assert applied == 4
    assert answer.changed == [(b"a", b"9", 7)]
    assert answer.source.applied_offset == 7


def test_a_wait_that_runs_out_says_how_far_the_replica_got():
    asked = Changes("t", 0, [(b"a", 0)], [], 3, 150)
    answer, applied = waits_through(asked, UNRELATED)
    assert applied == 3 and answer.changed == []
    assert answer.source.applied_offset == 6  # the asker's cursor moves past them


def test_a_deletion_under_a_prefix_is_answered_by_the_counts_the_asker_sent():
    asked = Changes("t", 0, [], [b"p:"], 3, 5_000, since=3, counts=[2])
    answer, applied = waits_through(asked, [*UNRELATED, [(b"p:x", None, 7)]])
    assert applied == 4 and answer.changed == [] and answer.counts == [1]


def test_counts_that_differ_already_are_answered_at_once():
    asked = Changes("t", 0, [], [b"p:"], 3, 5_000, since=3, counts=[3])
    answer, applied = waits_through(asked, UNRELATED)
    assert applied == 0 and answer.counts == [2]


def test_an_asker_without_counts_is_answered_after_any_write_past_its_cursor():
    # An older node watching a prefix learns deletions only from the counts it is sent.
    asked = Changes("t", 0, [], [b"p:"], 3, 5_000, since=3)
    answer, applied = waits_through(asked, UNRELATED)
    assert applied == 1 and answer.changed == [] and answer.source.applied_offset == 4

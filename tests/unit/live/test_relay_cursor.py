"""A relayed prefix watch asks with a cursor, not with every key it has seen, and still
learns every change: new keys, updates, deletions, and a prefix too big, which it is told."""

from __future__ import annotations

import asyncio

import msgspec

from kiq.live.feeds import Feed
from kiq.live.subscription import Subscription
from kiq.peers.wire import Changes, ChangesResult
from kiq.replicas.reads import MAX_PREFIX_KEYS
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role
from kiq.routing.local import LocalReplicas
from kiq.stores import MemoryPartitionStore


def replica(rows: list[tuple[bytes, bytes | None, int]]) -> Replica:
    store = MemoryPartitionStore()
    store.apply(rows, rows[-1][2])
    r = Replica("t", "topic", 0, store, Role.ACTIVE)
    r.move_to(ReplicaState.ACTIVE)
    r.end_offset = r.position = rows[-1][2] + 1
    return r


def write(r: Replica, rows: list[tuple[bytes, bytes | None, int]]) -> None:
    r.store.apply(rows, rows[-1][2])
    r.position = rows[-1][2] + 1


def relay_once(feed: Feed, r: Replica) -> Changes:
    """One round of the relay loop (``Feed._relay``) against ``r``: what it asked."""
    asked = feed.asked(0)
    answer = asyncio.run(LocalReplicas("n2", {("t", 0): r}).changes(asked))
    assert answer is not None
    feed.answered(answer, asked=asked)
    return asked


def watcher(prefix: bytes = b"p:") -> tuple[Feed, Subscription]:
    feed = Feed("t", 0, "n1")
    sub = Subscription("t", frozenset(), (prefix,), (0,), 100_000)
    feed.add(sub)
    return feed, sub


def told(s: Subscription) -> list[tuple[bytes, str]]:
    return sorted((e.key, e.kind.value) for e in s.take_now())


def test_the_request_carries_a_cursor_however_many_keys_were_seen():
    keys = [(b"p:%05d" % i + b"x" * 200, b"v", i) for i in range(5_000)]
    r = replica(keys)
    feed, sub = watcher()
    relay_once(feed, r)
    assert len(told(sub)) == 5_000
    asked = feed.asked(10_000)
    # today's relay sent all 5,000 keys (about 1 MiB); now: none of them, and a cursor
    assert asked.known == [] and asked.since == feed.through == 4_999
    assert len(msgspec.msgpack.encode(asked)) < 100


def test_new_keys_updates_and_deletions_all_arrive():
    r = replica([(b"p:a", b"1", 0), (b"p:b", b"2", 1), (b"p:c", b"3", 2), (b"q:z", b"9", 3)])
    feed, sub = watcher()
    relay_once(feed, r)
    assert told(sub) == [(b"p:a", "value"), (b"p:b", "value"), (b"p:c", "value")]
    write(r, [(b"p:d", b"4", 4), (b"p:a", b"11", 5)])
    relay_once(feed, r)
    assert told(sub) == [(b"p:a", "value"), (b"p:d", "value")]
    write(r, [(b"p:b", None, 6), (b"p:e", b"5", 7)])
    relay_once(feed, r)  # p:e arrives; the count says one key went
    assert told(sub) == [(b"p:e", "value")] and feed.resync
    asked = relay_once(feed, r)  # which one: asked with since -1, and no wait
    assert asked.since == -1 and asked.wait_ms == 0
    assert told(sub) == [(b"p:b", "delete")] and not feed.resync
    assert set(feed.found) == {b"p:a", b"p:c", b"p:d", b"p:e"}
    relay_once(feed, r)
    assert told(sub) == []


def test_a_prefix_too_big_for_a_watch_ends_it_saying_so():
    rows = [(b"p:%06d" % i, b"v", i) for i in range(MAX_PREFIX_KEYS + 5)]
    r = replica(rows)
    feed, sub = watcher()
    relay_once(feed, r)
    assert sub.dropped is not None and "p:" in sub.dropped
    assert str(MAX_PREFIX_KEYS) in sub.dropped


def test_a_replica_answers_a_cursor_with_what_was_written_after_it_and_counts():
    r = replica([(b"p:a", b"1", 0), (b"p:b", b"2", 1), (b"pq", b"3", 2), (b"p:c", b"4", 3)])
    here = LocalReplicas("n2", {("t", 0): r})
    asked = Changes("t", 0, [], [b"p:", b"p"], 1, 0, since=1)
    answer: ChangesResult | None = asyncio.run(here.changes(asked))
    assert answer is not None
    assert answer.changed == [(b"p:c", b"4", 3), (b"pq", b"3", 2)]  # each once
    assert answer.counts == [3, 4] and answer.overflow == []


def test_a_watcher_that_leaves_takes_the_keys_found_for_it_along():
    r = replica([(b"p:a", b"1", 0), (b"r:a", b"2", 1)])
    feed, _ = watcher(b"p:")
    two = Subscription("t", frozenset(), (b"r:",), (0,), 100)
    feed.add(two)
    relay_once(feed, r)
    assert set(feed.found) == {b"p:a", b"r:a"}
    feed.remove(two)
    assert set(feed.found) == {b"p:a"}


def test_the_request_carries_what_the_feed_holds_under_each_prefix():
    r = replica([(b"p:a", b"1", 0), (b"p:b", b"2", 1), (b"q:a", b"3", 2)])
    feed = Feed("t", 0, "n1")
    sub = Subscription("t", frozenset(), (b"p:", b"q:"), (0,), 100_000)
    feed.add(sub)
    relay_once(feed, r)
    assert feed.asked(10_000).counts == [2, 1]
    write(r, [(b"p:a", None, 3)])
    relay_once(feed, r)  # the counts differ: the next ask lists every key, and waits not
    assert feed.resync and feed.asked(10_000).wait_ms == 0
    relay_once(feed, r)
    assert not feed.resync and feed.asked(10_000).counts == [1, 1]

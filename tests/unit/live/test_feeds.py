"""A feed tells each watcher what a batch changed, and keeps what it knows for a relay."""

from __future__ import annotations

import asyncio

from kiq.live.feeds import UNKNOWN, Feed
from kiq.live.subscription import Subscription
from kiq.peers.wire import ChangesResult, Source


def sub(keys=(), prefixes=()) -> Subscription:
    return Subscription("t", frozenset(keys), tuple(prefixes), (0,), 100)


def told(s: Subscription) -> list[tuple[bytes, str, int]]:
    return [(e.key, e.kind.value, e.offset) for e in asyncio.run(s.take(0.01))]


def test_a_batch_reaches_key_and_prefix_watchers_and_expiries_say_so():
    feed = Feed("t", 0, "n1")
    by_key, by_prefix = sub(keys=(b"a",)), sub(prefixes=(b"p:",))
    feed.add(by_key)
    feed.add(by_prefix)
    feed.applied(12, [(b"a", b"1", 10), (b"zz", b"2", 11), (b"p:1", None, 12)], frozenset({12}))
    assert told(by_key) == [(b"a", "value", 10)]
    assert told(by_prefix) == [(b"p:1", "expire", 12)]
    assert feed.through == 12
    # what a relay would ask about: the key watched by name, never a key under a prefix
    assert feed.known == {b"a": 10} and feed.found == {}  # zz is nobody's, p:1 gone


def test_a_relayed_answer_tells_absent_for_keys_never_known_and_delete_after():
    feed = Feed("t", 0, "n1")
    s = sub(keys=(b"a", b"b"))
    feed.add(s)
    assert sorted(feed.asked(0).known) == [(b"a", UNKNOWN), (b"b", UNKNOWN)]
    source = Source(0, 0, True, 30, b"n2")
    feed.answered(ChangesResult([(b"a", b"1", 5), (b"b", None, 30)], source))
    assert told(s) == [(b"a", "value", 5), (b"b", "absent", 30)]
    assert feed.through == 30 and feed.served_by == "n2" and feed.stale
    feed.answered(ChangesResult([(b"a", None, 31)], Source(0, 0, False, 31, b"n2")))
    assert told(s) == [(b"a", "delete", 31)]


def test_a_subscriber_that_leaves_takes_its_keys_along():
    feed = Feed("t", 0, "n1")
    one, two = sub(keys=(b"a",)), sub(keys=(b"a", b"b"))
    feed.add(one)
    feed.add(two)
    feed.remove(two)
    assert set(feed.known) == {b"a"} and not feed.prefixed
    feed.remove(one)
    assert not feed.subs and not feed.known

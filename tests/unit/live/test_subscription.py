"""A subscriber's bookkeeping: nothing told twice, the latest state kept, cursors that resume."""

from __future__ import annotations

import asyncio

import pytest

from kiq.live import Cursor, Event, Kind
from kiq.live.events import BadCursor
from kiq.live.subscription import Subscription


def ev(key: bytes, offset: int, kind: Kind = Kind.VALUE, partition: int = 0) -> Event:
    value = b"%d" % offset if kind is Kind.VALUE else None
    return Event("t", key, kind, value, partition, offset, "n1", False, 0)


def sub(keys=(b"a",), prefixes=(), partitions=(0,), resume=None, max_pending=100):
    return Subscription(
        "t", frozenset(keys), tuple(prefixes), tuple(partitions), max_pending, resume
    )


def take(s: Subscription) -> list[tuple[bytes, int, str]]:
    events = asyncio.run(s.take(0.01))
    return [(e.key, e.offset, e.kind.value) for e in events]


def test_an_offset_already_told_is_not_told_again():
    s = sub()
    s.offer(ev(b"a", 5))
    s.offer(ev(b"a", 5))  # the snapshot and the tap that raced it
    s.offer(ev(b"a", 3))  # older
    assert take(s) == [(b"a", 5, "value")]
    s.offer(ev(b"a", 5))
    assert take(s) == []


def test_a_slow_subscriber_gets_each_keys_latest_state():
    s = sub(keys=(b"a", b"b"))
    for offset in range(10):
        s.offer(ev(b"a" if offset % 2 else b"b", offset))
    assert take(s) == [(b"b", 8, "value"), (b"a", 9, "value")]


def test_deletes_of_an_absent_key_are_not_told():
    s = sub()
    s.offer(ev(b"a", 4, Kind.ABSENT))
    s.offer(ev(b"a", 6, Kind.DELETE))
    assert take(s) == [(b"a", 4, "absent")]
    s.offer(ev(b"a", 7))
    s.offer(ev(b"a", 8, Kind.EXPIRE))
    assert take(s) == [(b"a", 8, "expire")]  # coalesced: the latest state


def test_too_many_keys_waiting_drops_the_subscriber():
    s = sub(keys=(), prefixes=(b"k",), max_pending=3)
    for i in range(4):
        s.offer(ev(b"k%d" % i, i))
    assert s.dropped is not None and "3 keys" in s.dropped
    assert len(take(s)) == 4  # what was kept is still there to send with the reason


def test_resuming_skips_what_the_cursor_covers():
    s = sub(keys=(b"a", b"b"), partitions=(0, 1), resume=Cursor.parse("0:10,1:20"))
    s.offer(ev(b"a", 10, partition=0))
    s.offer(ev(b"b", 15, partition=1))
    s.offer(ev(b"b", 21, partition=1))
    assert take(s) == [(b"b", 21, "value")]


def test_a_one_key_cursor_is_the_last_offset_and_many_keys_one_per_partition():
    one = sub()
    one.offer(ev(b"a", 42))
    take(one)
    assert one.cursor() == "42"
    many = sub(keys=(b"a", b"b"), partitions=(0, 3))
    many.through_of = lambda p: {0: 7, 3: 2}[p]
    many.snapshot_through[3] = 9
    assert many.cursor() == "0:7,3:9"
    assert Cursor.parse(many.cursor()).floor(3) == 9
    assert Cursor.parse("42").floor(5) == 42


@pytest.mark.parametrize("text", ["x", "1:2,3", "a:1", "1:b"])
def test_a_cursor_we_did_not_write_is_refused(text: str):
    with pytest.raises(BadCursor):
        Cursor.parse(text)


def test_a_change_that_beats_the_snapshot_is_told_as_the_snapshot():
    # A relay already running for another subscriber tells this one's key before its own
    # snapshot read answers: that first state is still its snapshot.
    s = sub(keys=(b"a",), partitions=(0,))
    s.offer(ev(b"a", 2))
    s.offer(ev(b"a", 2))  # the snapshot read, same offset
    s.offer(ev(b"a", 3))
    (first,) = asyncio.run(s.take(0.01))
    assert first.snapshot and first.offset == 3  # coalesced: the latest, still the first told
    s.offer(ev(b"a", 4))
    (change,) = asyncio.run(s.take(0.01))
    assert not change.snapshot


def test_a_prefix_key_is_a_snapshot_only_while_its_partition_snapshot_is_taken():
    s = sub(keys=(), prefixes=(b"k",), partitions=(0, 1))
    s.snapshotting.update({0, 1})
    s.offer(ev(b"k1", 1, partition=0))
    s.snapshotting.discard(0)
    s.offer(ev(b"k2", 2, partition=0))  # a key created after partition 0's snapshot
    s.offer(ev(b"k3", 3, partition=1))  # partition 1's snapshot is still being taken
    told = {e.key: e.snapshot for e in asyncio.run(s.take(0.01))}
    assert told == {b"k1": True, b"k2": False, b"k3": True}


def test_a_delete_coalesced_into_a_waiting_snapshot_is_told_as_absent():
    s = sub()
    s.offer(ev(b"a", 2))
    s.offer(ev(b"a", 3, Kind.DELETE))
    (first,) = asyncio.run(s.take(0.01))
    assert (first.kind, first.offset, first.snapshot) == (Kind.ABSENT, 3, True)

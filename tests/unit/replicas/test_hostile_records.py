"""Table records and their headers are untrusted input: a record the materializer cannot apply
is dead-lettered alone, and the rest of the fetch (other partitions and tables) is applied."""

from __future__ import annotations

import pytest

from kiq.errors import BadRecord
from kiq.kafka.reader import Fetched, Record
from kiq.replicas.aging import EXPIRE_BELOW
from kiq.replicas.headers import parse_offset, tombstone_guard
from kiq.tables import TableSpec
from kiq.tables.codecs import JsonCodec, ValueCodec
from tests.unit.replicas.records import Msg, rig

HUGE = b"9" * 5000  # int() of it raises: Python refuses more than 4,300 digits
AGING = TableSpec(name="t", topic="topic-t", ttl_ms=60_000)
PLAIN = TableSpec(name="u", topic="topic-u")


def fetch(
    records: dict[tuple[str, int], list[Msg]], ends: dict[tuple[str, int], int] | None = None
):  # type: ignore[no-untyped-def]
    typed: dict[tuple[str, int], list[Record]] = {tp: list(ms) for tp, ms in records.items()}
    return Fetched(typed, ends or {})


def test_a_5000_digit_expire_below_is_dead_lettered_alone_and_the_rest_of_the_fetch_applies():
    r = rig([AGING, PLAIN], partitions=2)
    r.materializer._apply(
        fetch(
            {
                ("topic-t", 0): [
                    Msg(b"a", b"1", 0),
                    Msg(b"a", None, 1, [(EXPIRE_BELOW, HUGE)]),
                    Msg(b"b", b"2", 2),
                ],
                ("topic-t", 1): [Msg(b"x", b"3", 0, p=1)],
                ("topic-u", 0): [Msg(b"y", b"4", 0)],
                ("topic-u", 1): [Msg(b"z", b"5", 0, p=1), Msg(b"z", None, 1, p=1)],
            },
            {("topic-t", 0): 3},
        )
    )
    assert r.store("t", 0).get(b"a") == (b"1", 0)  # the hostile tombstone deleted nothing
    assert r.store("t", 0).get(b"b") == (b"2", 2)
    assert r.store("t", 1).get(b"x") == (b"3", 0)
    assert r.store("u", 0).get(b"y") == (b"4", 0)
    assert r.store("u", 1).get(b"z") is None  # a plain tombstone deletes as ever
    assert [s.applied_offset() for s in r.stores.values()] == [2, 0, 0, 1]
    [(topic, partition, offset, reason)] = r.letters.sent
    assert (topic, partition, offset) == ("topic-t", 0, 1)
    assert EXPIRE_BELOW in reason and "5000 bytes" in reason and len(reason) < 200
    assert all(replica.fault is None for replica in r.materializer.replicas.values())


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (b"0", 0),
        (b"42", 42),
        (b"0000000000000000042", 42),
        (b"9223372036854775807", 2**63 - 1),
        (b"9223372036854775808", None),  # 2**63: no offset is that large
        (b"99999999999999999999", None),
        (b"00000000000000000001", None),  # 20 digits: longer than any offset is written
        (HUGE, None),
        (b"", None),
        (b"-1", None),
        (b"+1", None),
        (b" 1", None),
        (b"1_000", None),
        (b"1e3", None),
        ("\u0661".encode(), None),  # ARABIC-INDIC DIGIT ONE: a digit to str.isdigit
        ("12", None),  # not bytes
        (12, None),
        (None, None),
    ],
)
def test_an_offset_header_is_ascii_digits_below_2_to_the_63(raw: object, parsed: int | None):
    assert parse_offset(raw) == parsed


@pytest.mark.parametrize(
    ("headers", "raises"),
    [
        ([(EXPIRE_BELOW, b"abc")], False),
        ([(EXPIRE_BELOW, b"-5")], False),
        ([(EXPIRE_BELOW, None)], False),
        ([(EXPIRE_BELOW, "7")], False),  # a str, not bytes
        ([(EXPIRE_BELOW, b"1"), (EXPIRE_BELOW, b"1")], False),  # which one would hold?
        ([(EXPIRE_BELOW, b"1", b"extra")], False),  # not a (name, value) pair
        ([42], False),
        (None, True),  # the headers cannot be read (a name that is not UTF-8)
    ],
)
def test_a_tombstone_with_a_bad_guard_is_dead_lettered_and_deletes_nothing(
    headers: object, raises: bool
):
    r = rig([AGING])
    r.materializer._apply(
        fetch(
            {
                ("topic-t", 0): [
                    Msg(b"a", b"1", 0),
                    Msg(b"a", None, 1, headers, headers_raise=raises),
                    Msg(b"b", b"2", 2),
                ]
            }
        )
    )
    assert r.store("t").get(b"a") == (b"1", 0) and r.store("t").get(b"b") == (b"2", 2)
    assert [(offset) for _, _, offset, _ in r.letters.sent] == [1]
    assert r.store("t").applied_offset() == 2


def test_a_tombstone_with_a_valid_guard_or_only_other_headers_applies_as_before():
    assert tombstone_guard(Msg(b"a", None, 0, [("other", b"x"), (EXPIRE_BELOW, b"3")])) == 3
    assert tombstone_guard(Msg(b"a", None, 0, [("kiq.other", b"9" * 5000)])) is None
    assert tombstone_guard(Msg(b"a", None, 0, [])) is None
    with pytest.raises(BadRecord):
        tombstone_guard(Msg(b"a", None, 0, [(EXPIRE_BELOW, HUGE)]))


class Fussy(ValueCodec):
    """A codec that fails in a way no codec should: not with ``BadRecord``."""

    def decode(self, raw: bytes) -> bytes:
        if raw == b"boom":
            raise RuntimeError("codec bug")
        return JsonCodec().decode(raw)


def test_a_record_whose_check_raises_anything_is_dead_lettered_alone():
    r = rig([PLAIN], codec=lambda spec: Fussy())
    r.materializer._apply(
        fetch({("topic-u", 0): [Msg(b"a", b"1", 0), Msg(b"b", b"boom", 1), Msg(b"c", b"3", 2)]})
    )
    assert r.store("u").get(b"a") == (b"1", 0) and r.store("u").get(b"c") == (b"3", 2)
    [(_, _, offset, reason)] = r.letters.sent
    assert offset == 1 and "RuntimeError('codec bug')" in reason


def test_a_record_too_large_for_the_dead_letters_is_sent_without_its_payload():
    r = rig([PLAIN])
    r.letters.refuse = True
    r.materializer._apply(fetch({("topic-u", 0): [Msg(b"a", b"not json", 0), Msg(b"b", b"2", 1)]}))
    [(_, _, offset, reason)] = r.letters.sent
    assert offset == 0 and "not copied" in reason and "Message size too large" in reason
    assert r.store("u").get(b"b") == (b"2", 1) and r.store("u").applied_offset() == 1


def test_a_record_neither_applied_nor_dead_lettered_is_never_passed():
    r = rig([PLAIN], partitions=2)
    r.letters.refuse_all = True
    bad = [Msg(b"a", b"1", 0), Msg(b"b", b"not json", 1), Msg(b"c", b"3", 2)]
    r.materializer._apply(
        fetch(
            {("topic-u", 0): bad, ("topic-u", 1): [Msg(b"x", b"9", 0, p=1)]},
            {("topic-u", 0): 3, ("topic-u", 1): 1},
        )
    )
    faulted = r.materializer.replicas[("u", 0)]
    assert faulted.fault is not None and r.store("u").applied_offset() == -1
    assert faulted.position == 0  # its end event did not move it past what it lacks
    assert r.reader.unassigned == [("topic-u", 0)]  # read again later from what it holds
    assert r.store("u", 1).get(b"x") == (b"9", 0)  # the other partition went on

    r.letters.refuse_all = False
    r.materializer._retry_faulted(now=float("inf"))
    assert r.reader.assigned[-1] == ("topic-u", 0, 0)
    r.materializer._apply(fetch({("topic-u", 0): bad}, {("topic-u", 0): 3}))
    assert faulted.fault is None and r.store("u").applied_offset() == 2
    assert r.store("u").get(b"c") == (b"3", 2) and [o for _, _, o, _ in r.letters.sent] == [1]


def test_a_failure_in_one_partition_leaves_the_other_tables_partitions_applied():
    r = rig([AGING, PLAIN])

    def broken(key: bytes) -> None:
        raise OSError("IO error: read failed")

    r.store("t").get = broken  # type: ignore[method-assign]  # a guarded tombstone reads it
    r.materializer._apply(
        fetch(
            {
                ("topic-t", 0): [Msg(b"a", b"1", 0), Msg(b"q", None, 1, [(EXPIRE_BELOW, b"1")])],
                ("topic-u", 0): [Msg(b"y", b"4", 0)],
            },
            {("topic-t", 0): 2, ("topic-u", 0): 1},
        )
    )
    replica = r.materializer.replicas[("t", 0)]
    assert replica.fault is not None and "read failed" in replica.fault
    assert replica.position == 0 and r.store("t").applied_offset() == -1
    assert r.store("u").get(b"y") == (b"4", 0) and r.store("u").applied_offset() == 0


def test_a_window_ending_in_year_one_is_stored_and_moves_no_clock():
    spec = TableSpec(
        name="w", topic="topic-w", windowed=True, retention_ms=60_000, key_separator="|"
    )
    r = rig([spec, PLAIN])
    old = b"e|0001-01-01T00:00:00.000Z|0001-01-01T00:00:00.000Z"
    r.materializer._apply(
        fetch({("topic-w", 0): [Msg(old, b"1", 0)], ("topic-u", 0): [Msg(b"y", b"4", 0)]})
    )
    replica = r.materializer.replicas[("w", 0)]
    assert replica.position == 1 and replica.fault is None
    assert replica.aging is not None and replica.aging.ends_before == b""
    assert r.store("u").get(b"y") == (b"4", 0)

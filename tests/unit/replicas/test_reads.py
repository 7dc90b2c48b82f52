"""The door for reading a replica's store: aged entries are absent, a closed store raises."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from kiq.errors import StoreClosedError
from kiq.replicas import reads
from kiq.replicas.aging import Aging, shift
from kiq.replicas.replica import Replica
from kiq.replicas.state import Role
from kiq.stores import MemoryPartitionStore
from kiq.stores.index import encode_value, equal_bounds


def replica(
    rows: list[tuple[bytes, bytes]],
    aging: Aging | None,
    rank_by: str | None = None,
    index: tuple[str, ...] = (),
) -> Replica:
    """A replica holding ``rows``, the first written at offset 0, the next at 1, ..."""
    store = MemoryPartitionStore(rank_by, index)
    store.apply([(k, v, i) for i, (k, v) in enumerate(rows)], len(rows) - 1)
    return Replica("t", "topic-t", 0, store, Role.ACTIVE, aging)


def keys(n: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%04d" % i, b"v%d" % i) for i in range(n)]


def test_get_hides_a_key_below_the_ttl_cutoff_and_hands_back_the_stores_entry():
    aging = Aging()
    r = replica(keys(10), aging)
    assert reads.get(r, b"k0003") == (b"v3", 3)
    aging.raise_below(5)
    assert reads.get(r, b"k0003") is None  # aged out: absent
    assert reads.get(r, b"k0005") == (b"v5", 5)
    assert reads.get(r, b"nope") is None
    assert reads.entry(r, b"k0003") == (b"v3", 3)  # the unaged read still sees it


def test_get_hides_a_window_past_retention():
    aging = Aging(retention_ms=10 * 60_000)
    start = b"2026-11-25T10:00:00.000Z"
    old = b"u|" + start + b"|" + shift(start, 60_000)
    new_start = shift(start, 30 * 60_000)
    new = b"u|" + new_start + b"|" + shift(new_start, 60_000)
    r = replica([(old, b"1"), (new, b"2")], aging)
    aging.advance(shift(new_start, 60_000))
    assert reads.get(r, old) is None
    assert reads.get(r, new) == (b"2", 1)


def test_a_table_that_keeps_every_key_hides_nothing():
    r = replica(keys(5), None)
    assert reads.get(r, b"k0000") == (b"v0", 0)
    assert reads.get_many(r, [b"k0004", b"k0000"]) == [(b"k0004", b"v4"), (b"k0000", b"v0")]
    assert len(reads.scan(r, None, None, 10)) == 5


def test_get_many_and_scan_leave_out_aged_keys_and_a_page_is_read_past_them():
    aging = Aging()
    rows = keys(300)
    r = replica(rows, aging)
    aging.raise_below(250)
    assert reads.get_many(r, [b"k0001", b"k0299", b"nope"]) == [(b"k0299", b"v299")]
    assert reads.scan(r, None, None, 20) == rows[250:270]
    assert reads.scan(r, None, b"k0260", 20, reverse=True) == rows[259:249:-1]
    assert reads.scan(r, None, None, 100) == rows[250:]  # short: the range ended


def test_top_is_asked_again_while_aged_keys_take_places():
    aging = Aging()
    rows = [(b"k%02d" % i, orjson.dumps({"n": i})) for i in range(40)]
    r = replica(rows, aging, rank_by="n")
    assert [k for k, _ in reads.top(r, 3)] == [b"k39", b"k38", b"k37"]
    aging.raise_below(38)  # all but the two highest aged out
    assert [k for k, _ in reads.top(r, 3)] == [b"k39", b"k38"]
    assert reads.top(replica(rows, None), 3) == []  # an unranked store keeps no order


def test_by_index_leaves_out_aged_keys_and_reads_past_them():
    aging = Aging()
    # key k<i> has hotel H<i % 3>; written in key order, so offsets follow i
    rows = [(b"k%03d" % i, orjson.dumps({"hotel": f"H{i % 3}"})) for i in range(120)]
    r = replica(rows, aging, index=("hotel",))
    start, end = equal_bounds("H1")
    every = [k for k, _ in rows if orjson.loads(_value(rows, k))["hotel"] == "H1"]
    found = reads.by_index(r, "hotel", start, end, 100)
    assert [k for _, k, _ in found] == every
    assert all(e == encode_value("H1") + k and v == _value(rows, k) for e, k, v in found)
    aging.raise_below(90)  # keys below k090 aged out
    live = [k for k in every if int(k[1:]) >= 90]
    assert [k for _, k, _ in reads.by_index(r, "hotel", start, end, 5)] == live[:5]
    assert [k for _, k, _ in reads.by_index(r, "hotel", start, end, 5, True)] == live[::-1][:5]
    assert [k for _, k, _ in reads.by_index(r, "hotel", None, None, 4)] == [
        b"k090",
        b"k093",
        b"k096",
        b"k099",
    ]
    assert [k for _, k, _ in reads.by_index(r, "hotel", start, end, 100)] == live  # short: ended
    assert reads.by_index(r, "guest", None, None, 5) == []  # no such index
    assert reads.by_index(r, "hotel", start, end, 0) == []


def test_index_count_leaves_out_aged_keys_over_many_pages(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reads, "_COUNT_PAGE", 7)  # several pages of the index
    aging = Aging()
    rows = [(b"k%03d" % i, orjson.dumps({"hotel": f"H{i % 3}"})) for i in range(120)]
    r = replica(rows, aging, index=("hotel",))
    start, end = equal_bounds("H1")
    assert reads.index_count(r, "hotel", start, end) == 40
    assert reads.index_count(r, "hotel", None, None) == 120
    aging.raise_below(90)  # keys below k090 aged out: 30 left, 10 of them H1
    assert reads.index_count(r, "hotel", start, end) == 10
    assert reads.index_count(r, "hotel", None, None) == 30
    assert reads.index_count(r, "guest", None, None) == 0


def _value(rows: list[tuple[bytes, bytes]], key: bytes) -> bytes:
    return dict(rows)[key]


def test_under_caps_a_prefix_and_leaves_out_aged_keys():
    aging = Aging()
    rows = [(b"p:%06d" % i, b"v") for i in range(reads.MAX_PREFIX_KEYS + 2)]
    r = replica([*rows, (b"q:1", b"v")], aging)
    entries, overflows = reads.under(r, b"p:")
    assert overflows and len(entries) == reads.MAX_PREFIX_KEYS
    aging.raise_below(reads.MAX_PREFIX_KEYS)
    entries, overflows = reads.under(r, b"p:")
    assert overflows and entries == []  # the first MAX_PREFIX_KEYS read, all aged
    assert reads.under(r, b"q:") == ([(b"q:1", b"v", reads.MAX_PREFIX_KEYS + 2)], False)


def test_changes_tell_an_aged_key_as_absent_and_count_only_live_keys():
    aging = Aging()
    r = replica([(b"a:1", b"x"), (b"a:2", b"y"), (b"b", b"z")], aging)
    aging.raise_below(1)  # a:1 aged out
    known = [(b"a:1", 0), (b"b", 2), (b"gone", -1)]
    out, counts, overflow = reads.changes(r, known, [b"a:"], None, applied=2)
    assert out == [(b"a:1", None, 2), (b"a:2", b"y", 1)]
    assert counts == [1] and overflow == []
    out, _, _ = reads.changes(r, [], [b"a:"], 1, applied=2)
    assert out == []  # nothing under the prefix written after offset 1


def test_the_sweeps_read_sees_aged_entries():
    aging = Aging()
    r = replica(keys(5), aging)
    aging.raise_below(5)
    assert [e[0] for e in reads.entries(r, b"k0002", 2)] == [b"k0002", b"k0003"]


READS: dict[str, Callable[[Replica], object]] = {
    "get": lambda r: reads.get(r, b"k0001"),
    "get_many": lambda r: reads.get_many(r, [b"k0001"]),
    "scan": lambda r: reads.scan(r, None, None, 10),
    "scan reverse": lambda r: reads.scan(r, None, None, 10, reverse=True),
    "top": lambda r: reads.top(r, 3),
    "by_index": lambda r: reads.by_index(r, "v", None, None, 3),
    "under": lambda r: reads.under(r, b"k"),
    "changes": lambda r: reads.changes(r, [(b"k0001", 1)], [b"k"], None, 4),
    "entry": lambda r: reads.entry(r, b"k0001"),
    "entries": lambda r: reads.entries(r, None, 10),
}


@pytest.mark.parametrize("aging", [None, Aging()], ids=["keeps", "ages"])
@pytest.mark.parametrize("read", list(READS), ids=list(READS))
def test_a_store_closed_under_a_read_raises_and_is_never_an_absent_key(
    read: str, aging: Aging | None
):
    rows = [(b"k%04d" % i, b'{"n": %d, "v": "x"}' % i) for i in range(5)]
    r = replica(rows, aging, rank_by="n", index=("v",))
    assert READS[read](r)  # open: answers
    r.store.close()  # revoked, or closed to be reopened
    with pytest.raises(StoreClosedError):
        READS[read](r)

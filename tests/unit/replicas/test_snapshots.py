"""Reads as of a batch marker (``replicas.snapshots``) equal the store as it was at that
marker: checked against copies of a reference taken at each marker, with writes after it."""

from __future__ import annotations

import random

import orjson
import pytest

from kiq.replicas.snapshots import LATEST, BatchHistory
from kiq.stores.base import Change
from kiq.stores.index import encode_value, equal_bounds, range_bounds
from kiq.stores.memory import MemoryPartitionStore
from kiq.stores.rank import score_of

KEYS = [f"k{i:03d}".encode() for i in range(60)]


class Writer:
    """Writes as the materializer does: the history told before the store is written."""

    def __init__(
        self, history: BatchHistory, ranked: bool = False, index: tuple[str, ...] = ()
    ) -> None:
        self.store = MemoryPartitionStore(rank_by="n" if ranked else None, index=index)
        self.history = history
        self.offset = -1
        self.reference: dict[bytes, tuple[bytes, int]] = {}

    def write(self, rng: random.Random, count: int) -> None:
        batch: list[Change] = []
        for _ in range(count):
            self.offset += 1
            key = rng.choice(KEYS)
            if rng.random() < 0.2:
                batch.append((key, None, self.offset))
                self.reference.pop(key, None)
            else:
                value = orjson.dumps({"n": rng.randint(-50, 50), **_hotel(rng)})
                batch.append((key, value, self.offset))
                self.reference[key] = (value, self.offset)
        self.history.before_write(self.store.get, batch)
        self.store.apply(batch, self.offset)

    def mark(self, batch: int, now: float) -> dict[bytes, tuple[bytes, int]]:
        self.offset += 1
        self.store.apply([], self.offset)
        self.history.mark(batch, self.offset, now)
        return dict(self.reference)


def _hotel(rng: random.Random) -> dict[str, object]:
    """A text field that is often there, sometimes not indexable, sometimes missing."""
    pick = rng.random()
    if pick < 0.6:
        return {"hotel": rng.choice(["A", "B", "C", "D"])}
    return {"hotel": None} if pick < 0.8 else {}


def rows(state: dict[bytes, tuple[bytes, int]]) -> list[tuple[bytes, bytes, int]]:
    return [(k, v, o) for k, (v, o) in sorted(state.items())]


@pytest.mark.parametrize("seed", range(8))
def test_every_held_batch_reads_as_it_was_at_its_marker(seed: int) -> None:
    rng = random.Random(seed)
    writer = Writer(BatchHistory(keep_s=1e9, max_held=6), ranked=True)
    states: dict[int, dict[bytes, tuple[bytes, int]]] = {}
    marked: dict[int, int] = {}
    for batch in range(12):
        for _ in range(rng.randint(0, 3)):
            writer.write(rng, rng.randint(1, 15))
        states[batch] = writer.mark(batch, float(batch))
        marked[batch] = writer.offset
        writer.write(rng, rng.randint(0, 10))  # the next batch, under way: never seen
        assert writer.history.held() == list(range(max(0, batch - 5), batch + 1))
        for held in writer.history.held():
            view = writer.history.view(writer.store, held)
            assert view is not None and view.batch == held
            want = rows(states[held])
            for key in KEYS:
                got = view.get(key)
                assert got == states[held].get(key), (held, key)
            assert view.scan(None, None, 1000) == want
            assert view.scan(None, None, 1000, reverse=True) == want[::-1]
            low, high = sorted(rng.sample(KEYS, 2))
            inside = [r for r in want if low <= r[0] < high]
            for limit in (1, 3, 7, 100):
                assert view.scan(low, high, limit) == inside[:limit]
                assert view.scan(low, high, limit, reverse=True) == inside[::-1][:limit]
            ranked = sorted((score_of("n", v) + k, k, v, o) for k, v, o in want if score_of("n", v))
            for n in (1, 5, 100):
                assert view.top(n) == [(k, v, o) for _, k, v, o in ranked[:n]]
            prefix = b"k01"
            assert (
                view.top(3, prefix)
                == [(k, v, o) for _, k, v, o in ranked if k.startswith(prefix)][:3]
            )
            assert view.applied_offset() == marked[held]


def test_the_newest_is_latest_and_a_batch_not_held_is_none() -> None:
    writer = Writer(BatchHistory(keep_s=1e9))
    assert writer.history.view(writer.store, LATEST) is None  # no marker yet
    rng = random.Random(1)
    writer.write(rng, 5)
    first = writer.mark(7, 0.0)
    writer.write(rng, 5)
    second = writer.mark(8, 0.0)
    writer.write(rng, 5)
    latest = writer.history.view(writer.store, LATEST)
    assert latest is not None and latest.batch == 8
    assert latest.scan(None, None, 100) == rows(second)
    old = writer.history.view(writer.store, 7)
    assert old is not None and old.scan(None, None, 100) == rows(first)
    assert writer.history.view(writer.store, 6) is None


def test_old_markers_are_let_go_by_age_but_the_newest_is_kept() -> None:
    history = BatchHistory(keep_s=5.0, max_held=100)
    writer = Writer(history)
    for batch, now in enumerate([0.0, 1.0, 2.0, 3.0]):
        writer.mark(batch, now)
    writer.mark(4, 6.5)
    assert history.held() == [2, 3, 4]  # taken 4.5 s and 3.5 s before, and the newest
    writer.mark(5, 100.0)
    assert history.held() == [5]


def test_a_retried_batch_reads_as_its_last_marker_and_a_lower_id_starts_again() -> None:
    rng = random.Random(3)
    writer = Writer(BatchHistory(keep_s=1e9))
    before = writer.mark(1, 0.0)
    writer.write(rng, 10)
    again = writer.mark(2, 0.0)
    writer.write(rng, 10)
    retried = writer.mark(2, 0.0)  # Spark ran batch 2 again: its marker comes twice
    writer.write(rng, 4)
    view = writer.history.view(writer.store, 2)
    assert view is not None and view.scan(None, None, 100) == rows(retried)
    one = writer.history.view(writer.store, 1)
    assert one is not None and one.scan(None, None, 100) == rows(before)
    assert again is not None
    writer.mark(0, 0.0)  # the pipeline's checkpoint was reset: its ids start at 0 again
    assert writer.history.held() == [0]


def _entries(
    state: dict[bytes, tuple[bytes, int]], field: str
) -> list[tuple[bytes, bytes, bytes, int]]:
    """The reference: (entry, key, value, offset) of ``state``'s keys whose field is a text
    or a number, from their values as json, in entry order."""
    out = []
    for key, (value, offset) in state.items():
        found = orjson.loads(value).get(field)
        if isinstance(found, str | int) and not isinstance(found, bool):
            out.append((encode_value(found) + key, key, value, offset))
    return sorted(out)


@pytest.mark.parametrize("seed", range(6))
def test_index_reads_as_of_each_held_batch(seed: int) -> None:
    rng = random.Random(seed)
    writer = Writer(BatchHistory(keep_s=1e9, max_held=4), index=("hotel", "n"))
    states: dict[int, dict[bytes, tuple[bytes, int]]] = {}
    for batch in range(8):
        writer.write(rng, rng.randint(1, 20))
        states[batch] = writer.mark(batch, float(batch))
        writer.write(rng, rng.randint(0, 25))  # after the marker: never seen as of it
        for held in writer.history.held():
            view = writer.history.view(writer.store, held)
            assert view is not None
            assert view.index == ("hotel", "n")
            for field, bounds in (
                ("hotel", equal_bounds(rng.choice("ABCD"))),
                ("hotel", range_bounds("text", "B", None)),
                ("n", range_bounds("number", -20, 20)),
                ("n", (None, None)),
            ):
                want = [e for e in _entries(states[held], field) if _inside(e[0], *bounds)]
                for limit in (1, 4, 1000):
                    assert view.index_scan(field, *bounds, limit) == want[:limit]
                    got = view.index_scan(field, *bounds, limit, reverse=True)
                    assert got == want[::-1][:limit]
                assert view.index_count(field, *bounds) == len(want)
            assert view.index_scan("guest") == [] and view.index_count("guest") == 0


def _inside(entry: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or entry >= start) and (end is None or entry < end)

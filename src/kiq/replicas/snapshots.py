"""A replica's recent micro-batches: its partition as of each batch marker it applied.

A consistent pipeline writes a marker to every partition of its table once a
micro-batch is all written (``kiq.markers``). Reading every partition as of the same
marker is a snapshot of one whole batch across partitions (``?consistent=batch``).

Each replica keeps what it needs to answer as of its recent markers without copying
its store: per marker, the entries as they were at that marker of every key written
since (the first write after the marker records it; ``before_write``). A key's state as
of marker M is then the first such record in the intervals from M on, else what the
store holds now. The store is always read before the records are: the writer records
a key before it writes it, so a reader that saw the new value also finds the old one.

Kept: the markers of the last ``KEEP_S`` seconds, at most ``MAX_HELD``, and the newest
always; memory is what the table wrote in that time. Records start at the first marker
applied while serving (a restore's markers are replayed from a compacted log, whose
state at an old marker is not the batch's). A marker with a lower batch id than the
newest starts a new history (the pipeline's checkpoint was reset); the same id again
(a batch Spark retried) is a newer state of that batch, and reads as of it use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiq.stores.base import Change, ReadOnlyStore
from kiq.stores.index import extractor_of
from kiq.stores.rank import score_of, starts_window

KEEP_S = 10.0
MAX_HELD = 32
LATEST = -1  # a read "as of this replica's newest marker"

# (value, offset) as a store holds it, or None: absent
Entry = tuple[bytes, int] | None
_UNSEEN = object()


class _Interval:
    """What changed after one marker: each key's entry as of the marker, before its first
    write since."""

    __slots__ = ("batch", "offset", "priors", "taken_at")

    def __init__(self, batch: int, offset: int, taken_at: float) -> None:
        self.batch = batch
        self.offset = offset  # the marker's own offset: the replica had applied it
        self.taken_at = taken_at
        self.priors: dict[bytes, Entry] = {}


class BatchHistory:
    """The markers a replica holds, oldest first. Written by the materializer thread;
    read by request handlers, which take ``intervals`` once (it is replaced, never
    changed in place, but for the newest interval's ``priors``, which only grow)."""

    __slots__ = ("intervals", "keep_s", "kept", "marked", "max_held")

    def __init__(self, keep_s: float = KEEP_S, max_held: int = MAX_HELD, kept: bool = True) -> None:
        self.intervals: tuple[_Interval, ...] = ()
        self.keep_s = keep_s
        self.max_held = max(1, max_held)
        # False: a replica that cannot keep batches (a read worker's mirror of its node's
        # store sees no markers): it answers no read as of one, the next replica does.
        self.kept = kept
        # Whether the partition's log held a marker since the replica opened (a restore
        # replays the newest: compaction keeps one per partition): until it holds one, a
        # replica of a table that has them answers no read as of a batch.
        self.marked = False

    @property
    def latest(self) -> int | None:
        """The newest batch held; None before the first marker."""
        intervals = self.intervals
        return intervals[-1].batch if intervals else None

    def held(self) -> list[int]:
        return [interval.batch for interval in self.intervals]

    def before_write(self, get: Callable[[bytes], Entry], batch: Sequence[Change]) -> None:
        """Records, for the newest marker, each key of ``batch`` not written since it yet,
        as ``get`` reads it from the store (unaged): call before ``batch`` goes in."""
        intervals = self.intervals
        if not intervals or not batch:
            return
        priors = intervals[-1].priors
        for key, _, _ in batch:
            if key not in priors:
                priors[key] = get(key)

    def mark(self, batch: int, offset: int, now: float) -> None:
        """The replica applied batch ``batch``'s marker at ``offset`` (and all before it)."""
        self.marked = True
        held = self.intervals
        if held and batch < held[-1].batch:
            held = ()  # a new history: the pipeline's batches were counted again from 0
        first = 0
        while first < len(held) and now - held[first].taken_at > self.keep_s:
            first += 1
        first = max(first, len(held) + 1 - self.max_held)
        self.intervals = (*held[first:], _Interval(batch, offset, now))

    def saw(self) -> None:
        """A marker went by while the replica was not serving yet: not held, but known."""
        self.marked = True

    def clear(self) -> None:
        self.intervals = ()

    def view(self, store: ReadOnlyStore, batch: int) -> BatchView | None:
        """``store`` as of ``batch`` (``LATEST``: the newest held); None when not held."""
        intervals = self.intervals
        if not intervals:
            return None
        if batch == LATEST:
            return BatchView(store, intervals[-1:])
        for i in range(len(intervals) - 1, -1, -1):
            if intervals[i].batch == batch:
                return BatchView(store, intervals[i:])
        return None


class BatchView:
    """A store as of one marker (a ``ReadOnlyStore``): the store, less what was written
    after the marker. ``batch`` names it; ``applied_offset`` is the marker's offset."""

    __slots__ = ("_chain", "_store", "batch")

    def __init__(self, store: ReadOnlyStore, chain: Sequence[_Interval]) -> None:
        self._store = store
        self._chain = chain
        self.batch = chain[0].batch

    @property
    def rank_by(self) -> str | None:
        return self._store.rank_by

    @property
    def index(self) -> tuple[str, ...]:
        return self._store.index

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        """As ``top``: the store's entries less the keys written since the marker, plus
        those keys' entries as of it (their values then, encoded again), in order."""
        if limit <= 0 or field not in self._store.index:
            return []
        extra = len(self._changed(None, None))
        while True:
            asked = limit + extra
            rows = self._store.index_scan(field, start, end, asked, reverse)
            changed = self._changed(None, None)  # after the store's read
            if len(changed) <= extra or len(rows) < asked:
                break
            extra = len(changed)  # written meanwhile: read enough to step over them
        merged = [row for row in rows if row[1] not in changed]
        for key, entry, value, offset in self._entries_then(field, changed, start, end):
            merged.append((entry, key, value, offset))
        # At least ``limit`` of the store's entries are not changed keys' (or it has no
        # more): whatever it holds past the last one read is past this page too.
        merged.sort(key=lambda row: row[0], reverse=reverse)
        return merged[:limit]

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        """The store's count, less the changed keys' entries now in [start, end), plus
        their entries as of the marker there. Exact unless a key is written again while
        counting (then off by that key)."""
        if field not in self._store.index:
            return 0
        counted = self._store.index_count(field, start, end)
        changed = self._changed(None, None)  # after the store's count
        extract = extractor_of((field,))
        for key in changed:
            now = self._store.get(key)  # unaged, as the count: the view's readers age
            entry = None if now is None else extract(now[0])[0]
            if entry is not None and _within(entry + key, start, end):
                counted -= 1
        return counted + sum(1 for _ in self._entries_then(field, changed, start, end))

    @staticmethod
    def _entries_then(
        field: str, changed: dict[bytes, Entry], start: bytes | None, end: bytes | None
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        """(key, index entry, value, offset) of each changed key that had an entry of
        ``field`` in [start, end) as of the marker."""
        extract = extractor_of((field,))
        out: list[tuple[bytes, bytes, bytes, int]] = []
        for key, then in changed.items():
            if then is None:
                continue
            encoded = extract(then[0])[0]
            if encoded is not None and _within(encoded + key, start, end):
                out.append((key, encoded + key, then[0], then[1]))
        return out

    def applied_offset(self) -> int:
        return self._chain[0].offset

    def _prior(self, key: bytes) -> object:
        """The key's entry as of the marker when it was written since; else ``_UNSEEN``."""
        for interval in self._chain:
            found = interval.priors.get(key, _UNSEEN)
            if found is not _UNSEEN:
                return found
        return _UNSEEN

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        now = self._store.get(key)  # the store first (see the module's docstring)
        prior = self._prior(key)
        return now if prior is _UNSEEN else prior  # type: ignore[return-value]

    def _changed(self, start: bytes | None, end: bytes | None) -> dict[bytes, Entry]:
        """Every key in [start, end) written since the marker, with its entry as of it."""
        out: dict[bytes, Entry] = {}
        for interval in self._chain:
            for key, entry in list(interval.priors.items()):
                if key in out or (start is not None and key < start):
                    continue
                if end is None or key < end:
                    out[key] = entry
        return out

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, int]]:
        if limit <= 0:
            return []
        extra = len(self._changed(start, end))
        while True:
            asked = limit + extra
            rows = self._store.scan(start, end, asked, reverse)
            changed = self._changed(start, end)  # after the store's read
            if len(changed) <= extra or len(rows) < asked:
                break
            extra = len(changed)  # written meanwhile: read enough to step over them
        merged = [row for row in rows if row[0] not in changed]
        merged.extend((k, e[0], e[1]) for k, e in changed.items() if e is not None)
        # At least ``limit`` rows of the store's are not changed ones (or it has no more):
        # whatever it holds past its last row read is past this page too.
        merged.sort(key=lambda row: row[0], reverse=reverse)
        return merged[:limit]

    def top(
        self, n: int, prefix: bytes | None = None, window: bytes | None = None
    ) -> list[tuple[bytes, bytes, int]]:
        field = self._store.rank_by
        if n <= 0 or field is None:
            return []
        extra = len(self._changed(None, None))
        while True:
            asked = n + extra
            rows = self._store.top(asked, prefix, window)
            changed = self._changed(None, None)
            if len(changed) <= extra or len(rows) < asked:
                break
            extra = len(changed)
        ranked: list[tuple[bytes, bytes, bytes, int]] = []
        for key, value, offset in rows:
            if key not in changed:
                score = score_of(field, value)
                if score is not None:
                    ranked.append((score + key, key, value, offset))
        for key, entry in changed.items():
            if entry is None or (prefix and not key.startswith(prefix)):
                continue
            if window and not starts_window(key, window):
                continue
            score = score_of(field, entry[0])
            if score is not None:
                ranked.append((score + key, key, entry[0], entry[1]))
        ranked.sort()  # rank order, as ``scan``'s page: enough of the store's were read
        return [(key, value, offset) for _, key, value, offset in ranked[:n]]


def _within(entry: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or entry >= start) and (end is None or entry < end)

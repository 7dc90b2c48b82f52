"""What a replica of a table that ages no longer answers, and how a sweep's tombstone is guarded.

**TTL: age is measured by the log.** Each store entry carries the offset of the
record that wrote it. The first offset of the partition written at or after
``now - ttl`` (Kafka's offsets for times, ``kiq.kafka.times``) is the cutoff: an
entry below it was not written for ``ttl``. Every replica keeps its partition's
cutoff (``Aging.below``, raised by the sweeper each interval) and its readers treat
an entry below it as absent: one integer compare.

**Retention of windowed tables: the clock is the newest window end in the
partition.** A windowed key ends in ``{sep}START{sep}END``, times fixed-width ISO
8601 UTC (``2026-11-25T10:01:00.000Z``), so END is its last 24 bytes and compares as
bytes in time order. A window whose END is more than ``retention`` before the newest
END the partition holds is dropped. The newest END is learnt by a sweep's full pass
over the store and kept from then on by the materializer (each applied value's END);
it only moves forward.

**Tombstones are guarded.** The partition's active node writes a tombstone for each
key it found expired, with the header ``kiq.expire-below`` = the offset it read + 1.
A replica applies such a tombstone only to an entry written below that offset, so a
value written after the sweep read the key survives (``guard``). The header is read
as untrusted input (``replicas.headers``): a tombstone whose header is not one offset
is a bad record, sent to the dead letters, and deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from kiq.stores.base import Change

EXPIRE_BELOW = "kiq.expire-below"
# 2026-11-25T10:01:00.000Z: the width of a windowed key's START and END
WINDOW_TIME_BYTES = 24
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_Z = ord("Z")


class Aging:
    """One replica's view of what has aged out; written by the sweeper and the
    materializer, read by request handlers (plain attribute writes, atomic under the GIL).

    ``below``: entries written below this offset expired (0: none). ``ends_before``:
    windows whose END sorts below these bytes expired (empty: none).
    """

    __slots__ = ("below", "ends_before", "newest_end", "raced", "retention_ms", "sep")

    def __init__(self, retention_ms: int | None = None, sep: str = "|") -> None:
        self.below = 0
        self.ends_before = b""
        self.newest_end = b""
        self.retention_ms = retention_ms
        self.sep = ord(sep)
        # Keys whose guarded tombstone met a newer value: the log's last word on them is a
        # tombstone though they live; the active node writes their value again.
        self.raced: list[bytes] = []

    def expired(self, key: bytes, offset: int) -> bool:
        """Whether readers must treat ``key``, written at ``offset``, as absent."""
        return offset < self.below or key[-WINDOW_TIME_BYTES:] < self.ends_before

    def raise_below(self, cutoff: int) -> None:
        """The TTL cutoff now; it never moves back."""
        if cutoff > self.below:
            self.below = cutoff

    def window_end(self, key: bytes) -> bytes | None:
        """The END of a windowed ``key`` (its last 24 bytes), or None when it is not one."""
        n = WINDOW_TIME_BYTES
        if len(key) < 2 * n + 3 or key[-1] != _Z or key[-n - 1] != self.sep:
            return None
        return key[-n:]

    def saw(self, changes: Sequence[Change]) -> None:
        """The materializer applied ``changes``: the clock moves to their newest END."""
        if self.retention_ms is None:
            return
        newest = self.newest_end
        for key, value, _ in changes:
            if value is not None and key[-WINDOW_TIME_BYTES:] > newest:
                end = self.window_end(key)
                if end is not None:
                    newest = end
        if newest != self.newest_end:
            self.advance(newest)

    def advance(self, end: bytes) -> None:
        """The partition holds a window ending at ``end``: move the clock there if later."""
        if self.retention_ms is None or end <= self.newest_end:
            return
        try:
            cutoff = shift(end, -self.retention_ms)
        except (ValueError, OverflowError):  # not a time (or year 1 less retention): ignored
            return
        self.newest_end = end
        self.ends_before = cutoff


def shift(time: bytes, ms: int) -> bytes:
    """A window time ``ms`` later (earlier when negative), written as keys write it."""
    moment = datetime.strptime(time.decode(), _TIME_FORMAT).replace(tzinfo=UTC)
    moment += timedelta(milliseconds=ms)
    return (moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z").encode()


def guard(
    changes: list[Change], guards: dict[int, int], current: Callable[[bytes], int | None]
) -> tuple[list[Change], list[bytes]]:
    """``changes`` without the guarded tombstones that must not apply, and the keys raced.

    ``guards`` maps a tombstone's offset to its ``kiq.expire-below``; such a tombstone
    deletes its key only when the key's newest entry (earlier in ``changes``, else
    ``current(key)``, the store's) was written below it. A key whose newer value
    survives is reported in the result's second part: the log's last record for it is
    now a tombstone, which compaction would keep over the value.
    """
    latest: dict[bytes, int | None] = {}
    kept: list[Change] = []
    raced: list[bytes] = []
    for change in changes:
        key, value, offset = change
        below = guards.get(offset)
        if below is not None and value is None:
            now = latest[key] if key in latest else current(key)
            if now is None or now >= below:
                if now is not None:
                    raced.append(key)
                continue
        latest[key] = None if value is None else offset
        kept.append(change)
    return kept, raced

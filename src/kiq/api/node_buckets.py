"""Token buckets every process of a node counts in: a fixed table in a shared file mapping.

With read workers (``kiq serve --workers N``) a node is N processes, and a limit each
counted alone would let N times as much through. So the home process creates one
``BucketTable`` in its private directory (``kiq.workers.home``) and each worker maps
the same file: the rate limits of ``api/limits.py`` read and write it, and every
process sees every other's counts at once (a shared mapping).

The table holds ``regions`` limiters (the per-caller rate, refused credentials per
address), each a fixed number of 4-way sets of (fingerprint, ``full_at``) entries,
the bucket kept as in ``RateLimiter``: the time it is full again. A caller's
fingerprint is a keyed BLAKE2b of its name (the key is random per node and in the
file), so nobody can pick names that land in another caller's set: a new caller takes
an empty entry of its set, or one whose bucket is full again, else the entry closest
to full (the same as dropping the oldest caller when a dict is at its bound).

A token is taken by a read-modify-write under ``flock`` on the file (the kernel drops
the lock of a process that dies holding it, so a killed worker blocks nobody). Timed
on the project machine (timeit, one caller): a check that takes a token ~2 µs, ~1 µs
of it the lock, where a process's own dict takes ~0.2 µs; a refusal or a ``peek``
~0.6 µs, with no lock. ``peek`` only advises (``api/auth.py`` asks it before checking
a token), and an entry being written meanwhile at worst misjudges that one request.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAGIC = b"kiqbkt1\0"
WAYS = 4
_HEADER = struct.Struct("<8s16sII")  # magic, fingerprint key, sets per region, regions
_HEADER_BYTES = 64
_ENTRY = struct.Struct("<Qd")  # fingerprint (0: empty), full_at
_SET = struct.Struct("<" + "Qd" * WAYS)
_SET_BYTES = _SET.size
_MAX_NAMES = 65_536  # fingerprints remembered per process before they are worked out anew


class BucketTable:
    """The shared file: ``create`` it once per node (home), ``attach`` to it in each worker."""

    def __init__(self, path: Path, fd: int, view: mmap.mmap, key: bytes, sets: int, regions: int):
        self.path = path
        self._fd = fd
        self._view = view
        self._key = key
        self._sets = sets
        self._regions = regions
        self._names: dict[str, int] = {}

    @classmethod
    def create(cls, path: Path, clients: int, regions: int = 2) -> BucketTable:
        """A new table at ``path`` (mode 0600) holding at least ``clients`` callers per region."""
        sets = 1
        while sets * WAYS < clients:
            sets *= 2
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, _HEADER_BYTES + regions * sets * _SET_BYTES)  # zeros: all empty
            key = os.urandom(16)
            os.pwrite(fd, _HEADER.pack(MAGIC, key, sets, regions), 0)
            view = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, view, key, sets, regions)

    @classmethod
    def attach(cls, path: Path) -> BucketTable:
        """The table another process of this node created at ``path``."""
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            magic, key, sets, regions = _HEADER.unpack(os.pread(fd, _HEADER.size, 0))
            if magic != MAGIC or os.fstat(fd).st_size != _HEADER_BYTES + regions * sets * (
                _SET_BYTES
            ):
                raise ValueError(f"{path} is not a kiq bucket table: start the node again")
            view = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, view, key, sets, regions)

    def region(self, index: int) -> Buckets:
        if not 0 <= index < self._regions:
            raise ValueError(f"this table has {self._regions} regions")
        return Buckets(self, _HEADER_BYTES + index * self._sets * _SET_BYTES)

    def fingerprint(self, caller: str) -> int:
        names = self._names
        found = names.get(caller)
        if found is None:
            digest = hashlib.blake2b(caller.encode(), digest_size=8, key=self._key).digest()
            found = int.from_bytes(digest, "little") or 1  # 0 marks an empty entry
            if len(names) >= _MAX_NAMES:
                names.clear()
            names[caller] = found
        return found

    def close(self) -> None:
        self._view.close()
        os.close(self._fd)


class Buckets:
    """One limiter's region of a ``BucketTable``."""

    __slots__ = ("_base", "_fd", "_mask", "_table", "_view")

    def __init__(self, table: BucketTable, base: int) -> None:
        self._table = table
        self._view = table._view
        self._fd = table._fd
        self._base = base
        self._mask = table._sets - 1

    def take(self, caller: str, interval: float, capacity: float, now: float) -> float:
        """0 when ``caller`` may go on (its token taken), else the seconds until it may.

        A refusal needs no lock: a bucket only empties further until it is dropped, so
        what was seen empty is empty (a flood of refused requests costs a read each)."""
        fp = self._table.fingerprint(caller)
        at = self._base + (fp & self._mask) * _SET_BYTES
        view = self._view
        seen = _SET.unpack_from(view, at)
        for i in range(0, 2 * WAYS, 2):
            if seen[i] == fp:
                full_at: float = seen[i + 1]
                wait = (full_at if full_at > now else now) + interval - now - capacity
                if wait > 1e-9:
                    return wait
                break
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            entries = _SET.unpack_from(view, at)
            way = -1
            full_at = now
            for i in range(0, 2 * WAYS, 2):
                if entries[i] == fp:
                    way, full_at = i, entries[i + 1]
                    break
            after = (full_at if full_at > now else now) + interval
            wait = after - now - capacity
            if wait > 1e-9:
                return wait
            if way < 0:
                way = _free_way(entries, now)
            _ENTRY.pack_into(view, at + way * 8, fp, after)
            return 0.0
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def charge(self, caller: str, interval: float, now: float) -> None:
        """``interval`` taken from ``caller``'s bucket whatever it holds (work already done,
        such as the bytes of an answer sent): ``take`` refuses it until it has refilled."""
        fp, at = self._set_of(caller)
        with self._locked():
            entries = _SET.unpack_from(self._view, at)
            way, full_at = _find(entries, fp, now)
            if way < 0:
                way = _free_way(entries, now)
            after = (full_at if full_at > now else now) + interval
            _ENTRY.pack_into(self._view, at + way * 8, fp, after)

    def enter(self, caller: str, most: int) -> bool:
        """One more of ``caller``'s at once, unless it has ``most`` already (False). Kept as
        a count in the entry's second field; ``leave`` gives it back."""
        fp, at = self._set_of(caller)
        with self._locked():
            entries = _SET.unpack_from(self._view, at)
            way, count = _find(entries, fp, 0.0)
            if count >= most:
                return False
            if way < 0:
                way = _free_count(entries)
                if way < 0:  # every entry of the set held by others: refuse, never evict
                    return False
            _ENTRY.pack_into(self._view, at + way * 8, fp, count + 1)
            return True

    def leave(self, caller: str) -> None:
        """Gives back one ``enter``ed; an entry back at 0 is free for any caller."""
        fp, at = self._set_of(caller)
        with self._locked():
            way, count = _find(_SET.unpack_from(self._view, at), fp, 0.0)
            if way >= 0:
                left = count - 1
                _ENTRY.pack_into(self._view, at + way * 8, fp if left > 0 else 0, max(left, 0.0))

    def _set_of(self, caller: str) -> tuple[int, int]:
        """``caller``'s fingerprint, and where its set starts in the file."""
        fp = self._table.fingerprint(caller)
        return fp, self._base + (fp & self._mask) * _SET_BYTES

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def peek(self, caller: str, interval: float, capacity: float, now: float) -> float:
        """What ``take`` would answer, without taking a token (or the lock)."""
        fp = self._table.fingerprint(caller)
        entries = _SET.unpack_from(self._view, self._base + (fp & self._mask) * _SET_BYTES)
        for i in range(0, 2 * WAYS, 2):
            if entries[i] == fp:
                full_at: float = entries[i + 1]
                wait = (full_at if full_at > now else now) + interval - now - capacity
                return wait if wait > 1e-9 else 0.0
        return 0.0

    def held(self, now: float) -> int:
        """How many callers' buckets are not full (a scan: for tests and reports)."""
        count = 0
        view = self._view
        for s in range(self._mask + 1):
            entries = _SET.unpack_from(view, self._base + s * _SET_BYTES)
            count += sum(1 for i in range(0, 2 * WAYS, 2) if entries[i] and entries[i + 1] > now)
        return count


def _free_way(entries: tuple[float, ...], now: float) -> int:
    """The entry a new caller takes: an empty one, one full again, else the closest to full."""
    best, best_at = 0, entries[1]
    for i in range(0, 2 * WAYS, 2):
        if entries[i] == 0 or entries[i + 1] <= now:
            return i
        if entries[i + 1] < best_at:
            best, best_at = i, entries[i + 1]
    return best


def _find(entries: tuple[float, ...], fp: int, absent: float) -> tuple[int, float]:
    """The way of ``fp`` in a set and its value; (-1, ``absent``) when it holds none."""
    for i in range(0, 2 * WAYS, 2):
        if entries[i] == fp:
            return i, entries[i + 1]
    return -1, absent


def _free_count(entries: tuple[float, ...]) -> int:
    """The entry a new count takes: an empty one, else none (-1)."""
    for i in range(0, 2 * WAYS, 2):
        if entries[i] == 0 or entries[i + 1] <= 0:
            return i
    return -1

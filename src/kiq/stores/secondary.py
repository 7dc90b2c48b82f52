"""A partition store read by another process: RocksDB's secondary instance of a node's store.

A node's read workers (``kiq serve --workers``) answer lookups from the stores the node's
one writer keeps. Each opens a store as a secondary instance, which follows the primary's
MANIFEST and WAL when told to (``catch_up``), never writes, and answers reads at the
point it caught up to: the data and the applied offset of one of the writer's atomic
batches, never half of one. The writer's read cache has no place here (nothing would
tell it what changed); a lookup costs RocksDB's get, about 1 µs.

The primary deletes files as it compacts; a secondary keeps every file it uses open
(``max_open_files`` -1) so a read never finds one gone. Its own info log and the memtable
it replays from the WAL are under ``own_dir``, apart from the primary's directory.

Its secondary indexes are the primary's: the fields its meta family records, read again
at each catch-up (none while the primary rebuilds them), of those it was asked for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from kiq.stores.base import Change
from kiq.stores.budget import MemoryBudget
from kiq.stores.rocksdb import (
    _APPLIED_KEY,
    _INDEX_CF,
    _INDEX_FAMILIES,
    _INDEX_KEY,
    _META_CF,
    _OFFSET,
    _OFFSET_SIZE,
    _RANK_CF,
    _RANK_FAMILIES,
    RocksDBPartitionStore,
    _decode_fields,
    _families_of,
    _options,
    check_layout,
)

log = logging.getLogger(__name__)


class SecondaryStore(RocksDBPartitionStore):
    """Reads (``get``, ``scan``, ``top``, counts) of the store at ``path``, as of the last
    ``catch_up``; ``apply`` and ``wipe`` are the primary's alone."""

    def __init__(
        self,
        path: Path,
        own_dir: Path,
        budget: MemoryBudget,
        rank_by: str | None = None,
        index: Sequence[str] = (),
    ) -> None:
        self._path = path
        self._lock = threading.Lock()  # ``catch_up`` against ``close``
        self._closed = False
        self._rank_seq = 0
        self._hot: dict[bytes, tuple[bytes, int]] = {}  # unused: nothing tells it changes
        self._tops = {}  # heads kept until the next ``catch_up`` (which moves ``_rank_seq``)
        self._generation = 0
        # The writer never opens a store newer than it reads, but a worker must not either:
        # a store moved in by hand, or a writer of another version (``StoreTooNew``).
        check_layout(path)
        own_dir.mkdir(parents=True, exist_ok=True)
        families = {_META_CF: _secondary_options(budget)}
        present = _families_of(path)
        if _RANK_CF in present:
            families.update({name: _secondary_options(budget) for name in _RANK_FAMILIES})
        self._rank_by = rank_by if _RANK_CF in present else None
        self._asked = tuple(index)
        self._index_families_open = _INDEX_CF in present
        if self._index_families_open:
            families.update({name: _secondary_options(budget) for name in _INDEX_FAMILIES})
        self._index: tuple[str, ...] = ()
        self._positions: dict[str, int] = {}
        self._db = Rdict(
            str(path),
            _secondary_options(budget),
            column_families=families,
            access_type=AccessType.secondary(str(own_dir)),
        )
        self._open_families()
        self._meta = self._families[_META_CF]
        self._applied = self._read_applied()
        self._read_index()

    def _read_index(self) -> None:
        """The primary's indexed fields, as its meta family records them, of those asked."""
        if not self._index_families_open:
            return
        raw = self._meta.get(_INDEX_KEY)
        recorded = () if raw is None else (_decode_fields(raw) or ())
        self._positions = {f: i for i, f in enumerate(recorded) if f in self._asked}
        self._index = tuple(f for f in self._asked if f in self._positions)

    def _read_applied(self) -> int:
        raw = self._meta.get(_APPLIED_KEY)
        return -1 if raw is None else int(_OFFSET.unpack(raw)[0])

    def catch_up(self) -> int:
        """Follow the primary to its latest write; the applied offset now readable."""
        with self._lock:
            self._check_open()
            # A ranked read (``top``) keeps what it read only if no catch-up ran meanwhile.
            with self._rank_write():
                self._db.try_catch_up_with_primary()
                self._applied = self._read_applied()
                self._read_index()
            return self._applied

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        raw = self._raw(key)
        if raw is None:
            return None
        return raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0]

    def apply(self, batch: Sequence[Change], applied_offset: int) -> None:
        raise TypeError("a secondary store is read-only: its primary applies")

    def wipe(self) -> None:
        raise TypeError("a secondary store is read-only: its primary wipes")

    def has_room(self) -> bool:
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                del self._meta  # a family handle keeps the DB open
                self._release_families()
                self._db.close()
            except Exception as exc:
                log.warning("secondary store close failed path=%s error=%s", self._path, exc)

    def __repr__(self) -> str:
        return f"SecondaryStore({str(self._path)!r})"


def _secondary_options(budget: MemoryBudget) -> Options:
    opts = _options(budget)
    opts.create_if_missing(False)
    opts.set_max_open_files(-1)
    return opts

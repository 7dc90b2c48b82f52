"""Local state: one key-value store per table partition.

The only package that imports ``rocksdict``; everything above it sees
``PartitionStore``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from kiq.errors import ConfigError, KiqError
from kiq.stores.base import PartitionStore
from kiq.stores.budget import MemoryBudget
from kiq.stores.memory import MemoryPartitionStore
from kiq.stores.rocksdb import RocksDBPartitionStore, StoreTooNew

log = logging.getLogger(__name__)

# A table version's name (NAME, NAME@VERSION): kiq.tables.checks's rule, repeated here because
# stores sits beside tables in the layers (tests/unit/stores/test_table_dirs.py keeps them one).
_TABLE_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}(@[A-Za-z0-9_-]{1,40})?")


def internal_name_ok(name: object) -> bool:
    """Whether ``name`` may name a directory under ``data_dir/tables``: a table's name,
    never a path (no separator, never ``.`` or ``..``, no ``..`` in it)."""
    return (
        isinstance(name, str)
        and _TABLE_NAME.fullmatch(name) is not None
        and ".." not in name
        and name.partition("@")[0] != "."
    )


__all__ = [
    "MemoryBudget",
    "MemoryPartitionStore",
    "PartitionStore",
    "RocksDBPartitionStore",
    "StoreTooNew",
    "open_partition_store",
    "remove_table_stores",
    "table_dir",
]

_KINDS = ("rocksdb", "memory")


def open_partition_store(
    kind: str,
    data_dir: Path,
    table: str,
    partition: int,
    budget: MemoryBudget,
    rank_by: str | None = None,
    index: tuple[str, ...] = (),
) -> PartitionStore:
    """Open (creating if needed) the store of one table partition.

    RocksDB data goes to ``data_dir/tables/<table>/<partition>``, its memory counted
    in ``budget``, the node's. ``rank_by``: the table's rank field (``TableSpec.rank_by``),
    whose order the store keeps for ``top``. ``index``: the table's indexed value fields
    (``TableSpec.index``' names), whose entries it keeps for ``index_scan``.
    """
    if kind == "rocksdb":
        path = table_dir(data_dir, table)
        private_dir(data_dir)
        private_dir(path.parent, own=True)
        private_dir(path, own=True)
        return RocksDBPartitionStore(path / str(partition), budget, rank_by, index)
    if kind == "memory":
        return MemoryPartitionStore(rank_by, index)
    raise ConfigError(f"unknown store kind {kind!r}: use one of {', '.join(_KINDS)}")


def table_dir(data_dir: Path, table: str) -> Path:
    """Where a table's RocksDB stores live, one directory per partition: ``table`` must be a
    table's name (``NAME``, ``NAME@VERSION``), never a path."""
    if not internal_name_ok(table):
        raise KiqError(f"{table!r} is not a table name: its stores cannot be under {data_dir}")
    return data_dir / "tables" / table


def private_dir(path: Path, *, own: bool = False) -> Path:
    """``path``, made with its missing parents readable by this user alone (0700). One that
    is there already is left as it is, unless ``own``: a directory only kiq makes (the
    stores' own), made 0700 again."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for made in reversed(missing):
        made.mkdir(mode=0o700, exist_ok=True)
        os.chmod(made, 0o700)  # mkdir's mode is masked by the umask
    if own and not missing and path.is_dir() and not path.is_symlink() and mode_of(path) & 0o077:
        os.chmod(path, 0o700)
    return path


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def remove_table_stores(data_dir: Path, table: str) -> bool:
    """Delete every store of ``table`` under ``data_dir`` (closed first); whether any were
    there. Only a table's name is taken, and only a directory strictly inside
    ``data_dir/tables`` (links resolved) is deleted: nothing else, whatever ``table`` says."""
    if not internal_name_ok(table):
        log.warning("table stores not deleted table=%.200r reason=not a table name", table)
        return False
    root = (data_dir / "tables").resolve()
    path = table_dir(data_dir, table)
    if path.is_symlink() or not path.is_dir():
        return False
    resolved = path.resolve()
    if resolved.parent != root or resolved == root:
        log.warning("table stores not deleted table=%s reason=outside %s", table, root)
        return False
    shutil.rmtree(resolved)
    return True

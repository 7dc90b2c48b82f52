"""Versions of a table: how a version is named, where it is written, and which one serves.

A pipeline run with ``--version v2`` writes every table it declares to its own topic
(``TOPIC.v2``) from its own checkpoints, beside the version already serving. The default
version, ``v1``, keeps the names kiq always used (topic ``TOPIC``, store and metrics
``NAME``), so a deployment that never asks for versions sees no change.

Inside a node each version is a table of its own, named ``NAME@VERSION`` (``NAME`` alone
for ``v1``): its replicas, stores, forwards and metrics carry that internal name, and
``@`` never appears in a table's own name, so the two cannot collide. Callers keep using
``NAME``; which version it means is the table's alias, an ``Alias`` record in the table
catalog (key ``alias:APP/NAME``) that every node follows: ``kiq switch`` writes one, and
each node moves the name at once. Without an alias the name means ``v1`` if it exists,
else the first version in natural order (v2 before v10).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

import msgspec

from kiq import formats
from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError
from kiq.tables import checks

_R = TypeVar("_R", bound=checks.Checked)

DEFAULT_VERSION = "v1"
# Between a table's name and its version, in the names nodes use internally.
VERSION_MARK = "@"
_VERSION = checks.VERSION_NAME
_ALIAS = "alias:"


def check_version(version: str, what: str = "--version") -> str:
    """``version`` if it is a valid version name; else a ``ConfigError`` saying what is."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ConfigError(
            f"{what}: {version!r} is not a version name: use 1-40 of A-Z a-z 0-9 _ - "
            "(for example v2)"
        )
    return version


def internal_name(table: str, version: str) -> str:
    """The name a node keeps version ``version`` of ``table`` under."""
    return table if version == DEFAULT_VERSION else f"{table}{VERSION_MARK}{version}"


def split_internal(name: str) -> tuple[str, str]:
    """(table, version) of an internal name (``internal_name``'s inverse)."""
    table, mark, version = name.partition(VERSION_MARK)
    return table, (version if mark else DEFAULT_VERSION)


def public_name(name: str) -> str:
    """The table's own name, for an internal name (scopes and messages use it)."""
    return name.partition(VERSION_MARK)[0]


def versioned_topic(topic: str, version: str) -> str:
    """Where version ``version`` writes what version ``v1`` writes to ``topic``."""
    return topic if version == DEFAULT_VERSION else f"{topic}.{version}"


def run_name(pipeline: str, version: str) -> str:
    """A pipeline version's name: its checkpoint directory, its progress records' and its
    start record's (``stocks``, ``stocks@v2``)."""
    return internal_name(pipeline, version)


class Alias(msgspec.Struct, frozen=True, kw_only=True):
    """Which version ``table`` of application ``app`` names (``kiq switch``)."""

    table: str
    version: str
    app: str = "kiq"
    switched_at_ms: int = 0
    previous: str | None = None
    format_version: int = formats.CATALOG  # as ``Declared.format_version``

    @property
    def catalog_key(self) -> str:
        return alias_key(self.table, self.app)

    def check(self, key: str) -> None:
        """Its schema (``kiq.tables.checks``): a table's own name, versions, its own key."""
        checks.table(self.table)
        checks.version(self.version)
        checks.app(self.app)
        checks.count(self.switched_at_ms, "switched_at_ms", checks.MAX_MS)
        if self.previous is not None:
            checks.version(self.previous, "previous")
        checks.key(key, self.catalog_key)

    def encode(self) -> bytes:
        return msgspec.json.encode(self)


def alias_key(table: str, app: str) -> str:
    return f"{_ALIAS}{app}/{table}"


def decode_aliases(records: Mapping[str, bytes], app: str | None = None) -> dict[str, Alias]:
    """The aliases in a catalog read (``app``'s only, when given), by table name."""
    return {a.table: a for a in catalog_records(records, _ALIAS, Alias) if app in (None, a.app)}


def catalog_records(records: Mapping[str, bytes], prefix: str, kind: type[_R]) -> Iterator[_R]:
    """The records of one kind in a catalog read (their keys start with ``prefix``), each
    held to its schema (``kiq.tables.checks``); one that breaks it, or that kiq cannot read
    (written by a newer kiq, say), is logged once and skipped, never fatal."""
    for key, value in records.items():
        if key.startswith(prefix):
            record = checks.decode(CATALOG_TOPIC, key, value, kind)
            if record is not None:
                yield record


def current_version(versions: Iterable[str], alias: Alias | None) -> str | None:
    """The version a table's name means: its alias's when that version exists, else
    ``v1``, else the first in natural order (``v2`` before ``v10``); None when there is none."""
    known = sorted(versions, key=natural)
    if not known:
        return None
    if alias is not None and alias.version in known:
        return alias.version
    return DEFAULT_VERSION if DEFAULT_VERSION in known else known[0]


def natural(version: str) -> tuple[tuple[int, str], ...]:
    """A sort key that orders numbers within names by value: v2 < v10."""
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part)
        for part in re.split(r"(\d+)", version)
        if part
    )

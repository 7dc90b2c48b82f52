"""What kiq accepts in a record it reads from Kafka: the table catalog's and the progress topic's.

Whoever may write those topics (a pipeline's Kafka user, by docs/security.md) is trusted
with neither a node's disk nor its start: each record is held to its kind's schema here
(``check(key)`` on ``Declared``, ``Alias``, ``Started``, ``QueryProgress``) before
anything acts on it. Names follow the table-name rule and are never paths; numbers are
bounded and not negative; a record's key is the one its own fields make. A record that
breaks its schema is logged once (``catalog record refused``) and skipped, alone.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Sequence
from typing import Protocol, TypeVar

import msgspec

from kiq import formats
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC

log = logging.getLogger(__name__)

# A table's own name: 1-100 of A-Z a-z 0-9 . _ -, never "." or ".." or with ".." in it (a
# table's stores live in a directory of its name). A node's name for another version adds
# "@VERSION" (kiq.tables.versions).
_TABLE = re.compile(r"[A-Za-z0-9._-]{1,100}")
# A pipeline's name (its checkpoint directory), by the same rule, longer.
_PIPELINE = re.compile(r"[A-Za-z0-9._-]{1,200}")
VERSION_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
# Kafka's own rule for topic names.
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
# [app] name's rule, bounded.
_APP = re.compile(r"[A-Za-z0-9._-]{1,200}")
# Bounds: far above what kiq writes, far below what could hurt.
MAX_RECORD_BYTES = 256 * 1024
MAX_PARTITIONS = 100_000
MAX_MS = 10**14  # a time (ms since 1970, year 5138) or a duration in ms
MAX_COUNT = 2**62
MAX_TEXT = 1_000
MAX_ITEMS = 256
# A table's secondary indexes: at most this many, each on a value field of a kind here.
MAX_INDEXES = 8
INDEX_KINDS = ("text", "number")
MAX_INDEX_FIELD = 100


class Refused(ValueError):
    """A record that breaks its schema; the message says which field and why."""


def table_name_ok(name: object) -> bool:
    """Whether ``name`` is a table's own name (no version mark, never a path)."""
    return isinstance(name, str) and _TABLE.fullmatch(name) is not None and _path_safe(name)


def internal_name_ok(name: object) -> bool:
    """Whether ``name`` is a name a node keeps a table version under (``NAME``,
    ``NAME@VERSION``): what names a directory under ``data_dir/tables``."""
    if not isinstance(name, str):
        return False
    table, mark, version = name.partition("@")
    return table_name_ok(table) and (not mark or VERSION_NAME.fullmatch(version) is not None)


def _path_safe(name: str) -> bool:
    return ".." not in name and name != "."


def pipeline(value: object, what: str = "pipeline") -> None:
    """A pipeline's name (``stocks``), or with ``run``, a pipeline version's (``stocks@v2``)."""
    shown = value.partition("@") if isinstance(value, str) else ("", "", "")
    if not (
        isinstance(value, str)
        and _PIPELINE.fullmatch(shown[0])
        and _path_safe(shown[0])
        and (not shown[1] or VERSION_NAME.fullmatch(shown[2]))
    ):
        raise Refused(f"{what} {_short(value)} is not a pipeline name (1-200 of A-Z a-z 0-9 . _ -)")


def table(value: object, what: str = "table") -> None:
    if not table_name_ok(value):
        raise Refused(f"{what} {_short(value)} is not a table name (1-100 of A-Z a-z 0-9 . _ -)")


def internal(value: object, what: str) -> None:
    if not internal_name_ok(value):
        raise Refused(f"{what} {_short(value)} is not a table name (NAME or NAME@VERSION)")


def version(value: object, what: str = "version") -> None:
    if not isinstance(value, str) or not VERSION_NAME.fullmatch(value):
        raise Refused(f"{what} {_short(value)} is not a version name (1-40 of A-Z a-z 0-9 _ -)")


def topic(value: object, what: str = "topic") -> None:
    if not isinstance(value, str) or not TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        raise Refused(f"{what} {_short(value)} is not a Kafka topic name")


def app(value: object) -> None:
    if not isinstance(value, str) or not _APP.fullmatch(value):
        raise Refused(f"app {_short(value)} is not an application name")


def text(
    value: object, what: str, limit: int = MAX_TEXT, *, lines: bool = False, raw: bool = False
) -> None:
    """A string of at most ``limit`` characters, printable (``lines``: newlines and tabs
    too; ``raw``: any character, an error message's, say)."""
    if not isinstance(value, str) or len(value) > limit:
        raise Refused(f"{what} must be text of at most {limit} characters")
    if raw:
        return
    shown = value.replace("\n", "").replace("\t", "").replace("\r", "") if lines else value
    if not shown.isprintable():
        raise Refused(f"{what} {_short(value)} holds control characters")


def name(value: object, what: str, limit: int = MAX_TEXT) -> None:
    """Non-empty text of at most ``limit`` characters."""
    text(value, what, limit)
    if not value:
        raise Refused(f"{what} must not be empty")


def count(value: object, what: str, maximum: int = MAX_COUNT, minimum: int = 0) -> None:
    """A whole number from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise Refused(f"{what} must be a whole number from {minimum} to {maximum}")


def rate(value: object, what: str) -> None:
    """A finite number, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refused(f"{what} must be a number")
    if not math.isfinite(value) or not 0 <= value <= MAX_COUNT:
        raise Refused(f"{what} must be a finite number, not negative")


def sep(value: object) -> None:
    """One printable character that is no space: what splits a composite key."""
    if not isinstance(value, str) or len(value) != 1 or not value.isprintable() or value.isspace():
        raise Refused(f"sep {_short(value)} must be one printable character")


def items(values: object, what: str, limit: int = MAX_ITEMS) -> None:
    if not isinstance(values, tuple | list) or len(values) > limit:
        raise Refused(f"{what} must be a list of at most {limit}")


def index(fields: Sequence[tuple[object, object]]) -> None:
    """A table's indexed fields, as ``(field, kind)`` pairs: at most ``MAX_INDEXES``, each
    field a value field's name (1-100 printable characters) named once, each kind one of
    ``INDEX_KINDS``."""
    items(fields, "index", MAX_INDEXES)
    seen: set[object] = set()
    for field, kind in fields:
        name(field, "an indexed field", MAX_INDEX_FIELD)
        if kind not in INDEX_KINDS:
            raise Refused(
                f"indexed field {_short(field)}: type {_short(kind)} is not one of "
                f"{', '.join(INDEX_KINDS)}"
            )
        if field in seen:
            raise Refused(f"index names field {_short(field)} twice")
        seen.add(field)


def key(given: str, own: str) -> None:
    """A record's key is the one its fields make: no record speaks for another."""
    if given != own:
        raise Refused(f"its key is not its own (its fields make {_short(own)})")


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


class Checked(Protocol):
    def check(self, key: str) -> None:
        """Raise ``Refused`` if the record, stored under ``key``, breaks its schema."""


_R = TypeVar("_R", bound=Checked)
# Refusals already logged, so a record read again (each catalog read, each progress
# poll) is said once; bounded, so a flood of distinct records costs no memory.
_said: set[tuple[str, str, bytes, str]] = set()
_SAID_MAX = 4096


class _Versioned(msgspec.Struct):
    """Any record's format version: read before the record itself, which a newer kiq may
    have reshaped (``kiq.formats``)."""

    format_version: int = formats.UNVERSIONED


# The newest format version of each topic's records this kiq reads.
_KNOWN = {CATALOG_TOPIC: formats.CATALOG, PROGRESS_TOPIC: formats.PROGRESS}


def decode(
    topic_name: str, record_key: str, value: bytes, kind: type[_R], where: str = ""
) -> _R | None:
    """The record ``value`` (stored under ``record_key`` in ``topic_name``) as a ``kind``, or
    None, logged once, when it is no valid ``kind`` (``where``: its partition and offset, if
    known)."""
    try:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise Refused("its value is not bytes")
        if len(value) > MAX_RECORD_BYTES:
            raise Refused(f"its value is over {MAX_RECORD_BYTES} bytes")
        written = msgspec.json.decode(value, type=_Versioned).format_version
        if written < 1:
            raise Refused(f"format_version {written} is not a version")
        if formats.too_new(f"{topic_name} record", _short(record_key), written, _KNOWN[topic_name]):
            return None
        record = msgspec.json.decode(value, type=kind)
        record.check(record_key)
    except (msgspec.DecodeError, Refused, ValueError, TypeError, RecursionError) as exc:
        refused(topic_name, record_key, str(exc) or type(exc).__name__, value, where)
        return None
    return record


def refused(
    topic_name: str, record_key: str, reason: str, value: object = b"", where: str = ""
) -> None:
    """Log that a record was refused, once per record and place: the catalog's follower reads
    from the start what the start-up read saw, and names where each record is."""
    data = (
        bytes(value) if isinstance(value, bytes | bytearray | memoryview) else repr(value).encode()
    )
    digest = hashlib.blake2b(data, digest_size=16).digest()
    seen = (topic_name, record_key, digest, where)
    if seen in _said:
        return
    if len(_said) >= _SAID_MAX:
        _said.clear()
    _said.add(seen)
    log.warning(
        "catalog record refused topic=%s%s key=%s reason=%s",
        topic_name,
        f" {where}" if where else "",
        _short(record_key),
        reason,
    )

"""What an index read asks for, parsed from untrusted input: the field, its bounds, a cursor.

A table's secondary indexes (``TableSpec.index``, ``kiq.stores.index``) are read by
``GET /v1/tables/{table}/by/{field}/{value}`` (equality) and ``GET
/v1/tables/{table}/by/{field}?from=&to=`` (a range), and by ``kiq.Tables.by``. Each comes
down to [start, end) of index entries (``encode_value(field's value) + key``) that every
partition is asked for: ``Batches.by_index`` merges their pages by entry bytes, and the
cursor is the last entry a page returned, base64url. A cursor is only a bound: whatever
it holds, the read stays within [start, end) (``routing.local.past_cursor``).

Everything here is a 400 on bad input (a number that is none, a cursor that is no
base64 or too long), and a 404 for a field the table keeps no index of.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from kiq.api.errors import BadRequest, UnknownIndex
from kiq.api.params import decode_cursor
from kiq.stores.index import MAX_TEXT, equal_bounds, range_bounds, value_of
from kiq.tables import MAX_KEY_BYTES, TableRuntime
from kiq.tables.spec import IndexField

# The longest cursor taken: an entry is at most a text's encoding (escaped) and a key.
MAX_CURSOR = 4 * (2 * MAX_TEXT + 4 + MAX_KEY_BYTES) // 3 + 4
# A number as JSON writes one (no "nan", "inf", "1_000", "0x10", spaces).
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

Bound = str | float
# (index entry, key, value as stored)
IndexItem = tuple[bytes, bytes, bytes]


def indexes(runtime: TableRuntime, field: str) -> bool:
    """Whether ``runtime``'s table keeps an index of ``field``."""
    return any(indexed.field == field for indexed in runtime.spec.index)


def index_field(runtime: TableRuntime, field: str) -> IndexField:
    """The index ``runtime``'s table keeps of ``field``; a 404 saying how to declare it."""
    for indexed in runtime.spec.index:
        if indexed.field == field:
            return indexed
    name, field = runtime.spec.table, field[:100]  # a field is at most 100 characters
    kept = ", ".join(f.field for f in runtime.spec.index) or "none"
    raise UnknownIndex(
        f"table {name} has no index of {field!r} (its indexes: {kept}): its pipeline "
        f"declares one with ctx.write_table({name!r}, ..., index=[{field!r}])",
        table=name,
        field=field,
    )


def parse_bound(indexed: IndexField, raw: str, what: str) -> Bound:
    """``raw`` (a path segment or a query parameter named ``what``) as a value of the
    index: a number index takes a finite number only."""
    if indexed.kind == "text":
        return raw
    if not _NUMBER.fullmatch(raw):
        raise BadRequest(
            f"{what} must be a number: {indexed.field} is a number index, got {raw[:40]!r}",
            field=indexed.field,
        )
    number = float(raw)
    if not math.isfinite(number):
        raise BadRequest(f"{what} is beyond a number's range: {raw[:40]!r}", field=indexed.field)
    return number


def given_bound(indexed: IndexField, value: object, what: str) -> Bound:
    """A value given in Python (``kiq.Tables.by``): a number for a number index (or a
    string that reads as one), a string for a text index."""
    if indexed.kind == "number":
        if isinstance(value, str):
            return parse_bound(indexed, value, what)
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number):
                return number
        raise BadRequest(f"{what} must be a finite number: {indexed.field} is a number index")
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string: {indexed.field} is a text index")
    return value


def bounds(
    indexed: IndexField, value: Bound | None, low: Bound | None, high: Bound | None
) -> tuple[bytes, bytes]:
    """[start, end) of the entries whose field equals ``value`` (in key order), or, with no
    ``value``, is in [low, high] (either None: open; in field order, ties by key)."""
    if value is not None:
        return equal_bounds(value)
    return range_bounds(indexed.kind, low, high)


def index_cursor(cursor: str | None) -> bytes | None:
    """A ``next_cursor`` handed back: the entry it names; a 400 when it is none."""
    if not cursor:
        return None
    if len(cursor) > MAX_CURSOR:
        raise BadRequest(
            f"cursor is longer than any this API returns ({MAX_CURSOR} characters): "
            "pass next_cursor exactly as returned"
        )
    return decode_cursor(cursor)


def top_of(pages: Iterable[list[IndexItem]], n: int) -> list[tuple[bytes, bytes]]:
    """The first ``n`` (key, value) of number-index pages by (highest value, then key)."""
    items = [item for page in pages for item in page]
    items.sort(key=lambda item: (-_number(item[0]), item[1]))
    return [(key, value) for _, key, value in items[:n]]


def _number(entry: bytes) -> float:
    value = value_of(entry)
    return value if isinstance(value, float) else -math.inf  # a text sorts last

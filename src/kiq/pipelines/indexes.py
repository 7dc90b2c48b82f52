"""``ctx.write_table(..., index=[...])``: the value fields a table's replicas index, checked
against the DataFrame's schema before anything is declared or written.

An index covers one top-level field of the JSON value the table's records hold (the row's
columns, or ``value``'s struct), of a kind the nodes can order: text (a string column) or a
number (any numeric column). A mistake is an error naming the field, its type and what an
index can cover, not a table whose index the nodes cannot keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kiq.errors import ConfigError
from kiq.pipelines.records import PREFIX
from kiq.tables.checks import MAX_INDEX_FIELD, MAX_INDEXES
from kiq.tables.spec import IndexField, IndexKind

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

INDEXABLE = (
    "an index covers a text field (string) or a number field (tinyint, smallint, int, "
    "bigint, float, double, decimal)"
)


def index_names(table: str, index: object) -> tuple[str, ...]:
    """The field names ``index`` gives: a list or tuple of names (None: none)."""
    if index is None:
        return ()
    if isinstance(index, str):
        raise ConfigError(
            f"table {table}: index={index!r} is one name, not a list: pass a list of value "
            f"fields, index=[{index!r}]"
        )
    if not isinstance(index, list | tuple) or not all(isinstance(n, str) for n in index):
        raise ConfigError(
            f"table {table}: index must be a list of value field names, got {index!r}"
        )
    return tuple(index)


def index_fields(
    schema: StructType,
    table: str,
    index: object,
    *,
    value: str | None = None,
    window: str | None = None,
    exclude: Sequence[str] = (),
) -> tuple[IndexField, ...]:
    """``index``'s fields with their kinds, checked against ``schema`` (the DataFrame's):
    each a top-level field of the JSON value (``value``'s struct, else every column but
    kiq's and ``exclude``), text or numeric, named once, not the ``window`` column; at most
    ``MAX_INDEXES``."""
    names = index_names(table, index)
    if not names:
        return ()
    if len(names) > MAX_INDEXES:
        raise ConfigError(
            f"table {table}: index names {len(names)} fields; a table has at most "
            f"{MAX_INDEXES} indexes"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"table {table}: index names {', '.join(map(repr, twice))} twice")
    fields = _value_fields(schema, table, value, exclude)
    out = []
    for name in names:
        if window is not None and name == window:
            raise ConfigError(
                f"table {table}: index field {name!r} is the window column; its start and "
                "end already end every key, so a key's windows sort by time"
            )
        if not 0 < len(name) <= MAX_INDEX_FIELD or not name.isprintable():
            raise ConfigError(
                f"table {table}: index field {name!r}: an indexed field's name is 1-"
                f"{MAX_INDEX_FIELD} printable characters"
            )
        if name not in fields:
            raise ConfigError(
                f"table {table}: index field {name!r} is not a top-level field of the JSON "
                f"value (its fields: {', '.join(fields) or 'none'})"
            )
        out.append(IndexField(name, _kind(table, name, fields[name])))
    return tuple(out)


def _value_fields(
    schema: StructType, table: str, value: str | None, exclude: Sequence[str]
) -> dict[str, DataType]:
    """The JSON value's top-level fields by name, as ``kiq.pipelines.tables.value_of``
    writes it."""
    from pyspark.sql.types import StructType

    if value is None:
        return {
            f.name: f.dataType
            for f in schema.fields
            if not f.name.startswith(PREFIX) and f.name not in exclude
        }
    kind = schema[value].dataType if value in schema.fieldNames() else None
    if not isinstance(kind, StructType):
        shown = kind.simpleString() if kind is not None else "missing"
        raise ConfigError(
            f"table {table}: an index covers fields of a JSON object value, and value="
            f"{value!r} is not a struct column ({shown}): leave value out (the row's "
            "columns) or name a struct column"
        )
    return {f.name: f.dataType for f in kind.fields}


def _kind(table: str, name: str, kind: DataType) -> IndexKind:
    from pyspark.sql.types import NumericType, StringType

    if isinstance(kind, StringType):
        return "text"
    if isinstance(kind, NumericType):
        return "number"
    raise ConfigError(f"table {table}: index field {name!r} is {kind.simpleString()}; {INDEXABLE}")

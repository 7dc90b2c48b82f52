"""Tables: which topic backs each served table, and how its values are decoded."""

from __future__ import annotations

from kiq.tables.codecs import ValueCodec, codec_for
from kiq.tables.spec import TableSpec, parse_table
from kiq.tables.table_runtime import MAX_KEY_BYTES, TableRuntime

__all__ = [
    "MAX_KEY_BYTES",
    "TableRuntime",
    "TableSpec",
    "ValueCodec",
    "codec_for",
    "parse_table",
]

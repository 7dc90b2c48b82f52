"""A served table as a node runs it: its spec, its value codec and its partition count."""

from __future__ import annotations

from dataclasses import dataclass

from kiq.tables.codecs import ValueCodec
from kiq.tables.spec import TableSpec

# Longer keys are refused at the API and sent to the dead-letter topic by the materializer:
# a key is also a RocksDB key and a URL path segment.
MAX_KEY_BYTES = 4096


@dataclass(frozen=True)
class TableRuntime:
    spec: TableSpec
    codec: ValueCodec
    partitions: int

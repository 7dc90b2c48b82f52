"""What ``kiq.Tables`` reads answer with: ``Read`` (one key), ``Many`` (keys), ``Page`` (a range),
``Windows`` (one key's windows, a ``Page``), and ``Served``, the replica behind a partition's
part of the answer.

Each result holds the values as stored (``Read.value``, ``Many.found``, ``Page.items``) and
gives them in two more forms, named the same on every result:

    parsed()      Python objects: a JSON table's values parsed, a raw table's bytes as stored
    fragments()   JSON for a ``json_reply``, neither parsed nor encoded again: a JSON value
                  embedded as stored (``orjson.Fragment``), a raw one as base64 text, as the
                  table API answers them; only for embedding: a fragment cannot be indexed
                  (``Read.fragment()``: its one value)

A result type added later follows the same scheme. Each also says how fresh its answer
was: the replica that answered for each partition read (``Served``: its node, its lag,
whether it was the active one), ``stale`` and ``lag`` over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from kiq.api.batches import value_json
from kiq.peers import Source
from kiq.tables import TableRuntime
from kiq.tables.windows import split_window_key


def parsed_value(runtime: TableRuntime, value: bytes) -> Any:
    """A stored value as a Python object: parsed JSON, or a raw table's bytes as they are."""
    return value if runtime.spec.format == "raw" else orjson.loads(value)


@dataclass(frozen=True, slots=True)
class Served:
    """The replica that answered for one partition of a read, and how fresh it was."""

    partition: int
    served_by: str  # the node whose replica answered ("" when an older node did not say)
    lag: int  # records that replica was behind its partition's log end
    stale: bool  # not the active replica: a standby, or a copy left from before a rebalance
    applied_offset: int  # the last offset it had applied (-1: unknown)
    batch: int = -1  # the micro-batch it answered as of (``consistent="batch"``); -1: none

    @classmethod
    def of(cls, source: Source) -> Served:
        return cls(
            source.partition,
            source.served_by.decode(),
            max(source.lag, 0),
            source.stale,
            source.applied_offset,
            source.batch,
        )


def _batch(served: tuple[Served, ...]) -> int | None:
    """The micro-batch a read as of one reflects (every partition's); None: not one."""
    batches = {s.batch for s in served}
    return batches.pop() if len(batches) == 1 and -1 not in batches else None


def _stale(served: tuple[Served, ...]) -> bool:
    return any(s.stale for s in served)


def _lag(served: tuple[Served, ...]) -> int:
    return max((s.lag for s in served), default=0)


@dataclass(frozen=True, slots=True)
class Read:
    """What ``Tables.read`` found for one key: its stored value, and where it came from."""

    table: TableRuntime
    key: str
    value: bytes  # as stored
    partition: int
    offset: int  # of the record that wrote the value
    lag: int  # records the answering replica was behind its log end
    stale: bool  # from a replica that is not the active one (X-Kiq-Stale)
    served_by: str  # the node whose replica answered (X-Kiq-Served-By)

    def parsed(self) -> Any:
        """The value as a Python object (see the module's docstring)."""
        return parsed_value(self.table, self.value)

    def fragment(self) -> Any:
        """The value to embed in a ``json_reply`` as it is (see the module's docstring)."""
        return value_json(self.table, self.value)


@dataclass(frozen=True)
class Many:
    """What ``Tables.get_many`` found: stored values by key, and the keys it did not."""

    table: TableRuntime
    found: dict[str, bytes]
    missing: list[str]
    unavailable: list[str]  # no replica of their partitions could answer
    served: tuple[Served, ...] = ()  # per partition that answered

    @property
    def batch(self) -> int | None:
        """``consistent="batch"``: the micro-batch every partition was read as of."""
        return _batch(self.served)

    @property
    def stale(self) -> bool:
        """Whether any part came from a replica that is not the active one."""
        return _stale(self.served)

    @property
    def lag(self) -> int:
        """The most records any answering replica was behind."""
        return _lag(self.served)

    def parsed(self) -> dict[str, Any]:
        """The found values by key, as Python objects."""
        return {key: parsed_value(self.table, value) for key, value in self.found.items()}

    def fragments(self) -> dict[str, Any]:
        """The found values by key, to embed in a ``json_reply`` as the table API does."""
        return {key: value_json(self.table, value) for key, value in self.found.items()}


@dataclass(frozen=True)
class Page:
    """What ``Tables.range`` read: (key, stored value) in the order asked, and where to go on;
    what ``Tables.top`` read: the keys in rank order (``next_cursor`` None); what
    ``Tables.by`` read: the rows by an indexed field, and with ``count=True`` how many match."""

    table: TableRuntime
    items: list[tuple[str, bytes]]
    next_cursor: str | None  # pass it back as ``cursor`` (same order) for the next page
    served: tuple[Served, ...] = ()  # per partition read
    count: int | None = None  # ``Tables.by(..., count=True)``: every matching row, all pages

    @property
    def batch(self) -> int | None:
        """``consistent="batch"``: the micro-batch every partition was read as of."""
        return _batch(self.served)

    @property
    def stale(self) -> bool:
        """Whether any partition was read from a replica that is not the active one."""
        return _stale(self.served)

    @property
    def lag(self) -> int:
        """The most records any replica read was behind."""
        return _lag(self.served)

    def keys(self) -> list[str]:
        """The keys, in the page's order."""
        return [key for key, _ in self.items]

    def parsed(self) -> list[Any]:
        """The values in the page's order, as Python objects (their keys: ``keys()``)."""
        return [parsed_value(self.table, value) for _, value in self.items]

    def fragments(self) -> list[Any]:
        """The values in the page's order, to embed in a ``json_reply``."""
        return [value_json(self.table, value) for _, value in self.items]

    def fragment_items(self) -> list[dict[str, Any]]:
        """``[{"key": ..., "value": ...}]``, as ``GET /v1/tables/{t}/range`` answers."""
        return [{"key": key, "value": value_json(self.table, v)} for key, v in self.items]


@dataclass(frozen=True)
class Windows(Page):
    """What ``Tables.windows`` read: one key's windows (a windowed table), oldest first or
    (``order="desc"``) newest first; ``items`` hold the stored keys, which end in each
    window's start and end."""

    key: str = ""
    sep: str = "|"

    def bounds(self) -> list[tuple[str, str]]:
        """(start, end) of each window, ISO 8601 UTC to the millisecond, in the page's order."""
        return [split_window_key(key, self.sep)[1:] for key, _ in self.items]

    def fragment_windows(self) -> list[dict[str, Any]]:
        """``[{"start", "end", "value"}]``, as ``GET .../keys/{key}/windows`` answers."""
        return [
            {"start": start, "end": end, "value": value_json(self.table, value)}
            for (start, end), (_, value) in zip(self.bounds(), self.items, strict=True)
        ]

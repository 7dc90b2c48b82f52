"""What the client's calls return besides plain values: a lookup with where it was read,
pages of keys, a multiget's three sets, a watched change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar

ChangeKind = Literal["value", "absent", "delete", "expire"]
T = TypeVar("T")


@dataclass(frozen=True)
class Lookup:
    """A key's value and where it came from: ``offset`` in the table's topic, the
    ``served_by`` node, its ``lag`` in records, whether it was a standby's (``stale``), and
    the answer's ``position`` token (``X-Kiq-Position``: the offset its replica applied)."""

    table: str
    key: str
    value: Any
    partition: int
    offset: int
    served_by: str
    lag: int = 0
    stale: bool = False
    position: str = ""


class Item(NamedTuple):
    """A key and its value, as a scan or a top answers them."""

    key: str
    value: Any


class Window(NamedTuple):
    """One window of a windowed table's key: its start and end (ISO 8601 UTC) and value."""

    start: str
    end: str
    value: Any


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a range scan or an index read (``Item``s) or of a key's windows
    (``Window``s); ``next_cursor`` None: the last one."""

    items: list[T]
    next_cursor: str | None
    batch: int | None = None  # consistent="batch": the micro-batch it reflects
    count: int | None = None  # an index read with count=True: every row that matches


@dataclass(frozen=True)
class Many:
    """A multiget: ``found`` values by key, the keys no table holds (``missing``) and those
    no replica could answer for (``unavailable``)."""

    found: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    batch: int | None = None  # consistent="batch": the micro-batch it reflects


@dataclass(frozen=True)
class Change:
    """One event of a watch: a key's value (``kind`` value: the snapshot or a change), or
    none (absent at the snapshot, a delete, an expiry), with its offset and replica."""

    kind: ChangeKind
    table: str
    key: str
    value: Any
    partition: int
    offset: int | None
    served_by: str = ""
    stale: bool = False
    lag: int = 0
    snapshot: bool = False
    id: str | None = None

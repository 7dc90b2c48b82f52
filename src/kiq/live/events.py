"""What a watch tells its subscriber, and the cursor a reconnecting subscriber resumes from.

Every event carries the offset of the record behind it: the value's, a tombstone's, or
for a key found absent the offset its replica held everything up to. A stream of one key
resumes from one offset; a stream of several keys from one offset per partition, the
point up to which every change of its keys in that partition was sent (``Cursor``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Kind(Enum):
    VALUE = "value"  # the key's value: the snapshot, or a change
    ABSENT = "absent"  # snapshot: the key has no value
    DELETE = "delete"  # a tombstone removed the key
    EXPIRE = "expire"  # the table's TTL or retention removed it


@dataclass(frozen=True, slots=True)
class Event:
    table: str
    key: bytes
    kind: Kind
    value: bytes | None  # as stored; None unless VALUE
    partition: int
    offset: int
    served_by: str  # the node whose replica it came from
    stale: bool  # from a replica that is not the partition's active one
    lag: int  # records that replica was behind its log end when it answered (-1: unknown)
    snapshot: bool = False  # the state found when the watch began (or resumed)
    # Its encoding on the wire, made by the first stream that sends it and reused by every
    # other subscriber of the change (``replace`` starts a copy without it).
    wire: bytes | None = field(default=None, init=False, compare=False, repr=False)


class BadCursor(ValueError):
    """A Last-Event-ID this stream did not write."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a stream resumes: one offset for a one-key stream, else per partition."""

    offset: int | None = None
    partitions: tuple[tuple[int, int], ...] = ()

    def floor(self, partition: int) -> int | None:
        """The offset up to which this partition's changes were sent (None: nothing known)."""
        if self.offset is not None:
            return self.offset
        for p, through in self.partitions:
            if p == partition:
                return through
        return None

    def text(self) -> str:
        if self.offset is not None:
            return str(self.offset)
        return ",".join(f"{p}:{o}" for p, o in self.partitions)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """``Last-Event-ID`` as this module writes it: ``OFFSET`` or ``P:O,P:O,...``."""
        text = text.strip()
        try:
            if ":" not in text:
                return cls(offset=int(text)) if text else cls()
            pairs = []
            for part in text.split(","):
                p, _, o = part.partition(":")
                pairs.append((int(p), int(o)))
        except ValueError:
            raise BadCursor(f"Last-Event-ID {text[:60]!r} is not one this stream sent") from None
        return cls(partitions=tuple(pairs))

"""The headers kiq reads from a table record, parsed as what they are: untrusted input.

Whoever may write a table's topic writes its headers too, so a header is checked
before anything acts on it: an offset is ASCII digits only, at most 19 of them, and
below 2**63 (Kafka's offsets are signed 64-bit). Parsing never raises on what a
record carries; a record whose kiq header is not what kiq writes is a bad record
(``BadRecord``: the materializer sends it to the dead letters and goes on).

Only ``kiq.expire-below`` is read today, and only on a tombstone (``replicas.aging``).
"""

from __future__ import annotations

from kiq.errors import BadRecord
from kiq.kafka.reader import Record
from kiq.replicas.aging import EXPIRE_BELOW

OFFSET_LIMIT = 2**63  # an offset is 0 <= n < 2**63
MAX_OFFSET_DIGITS = len(str(OFFSET_LIMIT - 1))  # 19
_PREVIEW_BYTES = 32  # of a bad header, in the dead letter's reason


def parse_offset(raw: object) -> int | None:
    """``raw`` as an offset, or None when it is not one (never raises).

    Bounded before ``int``: 5,000 digits would exceed Python's conversion limit
    and 50,000 would cost the reading thread milliseconds.
    """
    if type(raw) is not bytes or not 0 < len(raw) <= MAX_OFFSET_DIGITS or not raw.isdigit():
        return None  # bytes.isdigit is ASCII digits only
    n = int(raw)
    return n if n < OFFSET_LIMIT else None


def tombstone_guard(record: Record) -> int | None:
    """A tombstone's ``kiq.expire-below`` (None: it has none, a plain delete).

    Raises ``BadRecord`` when the headers cannot be read (a name that is not UTF-8),
    or the header is there but not one offset: such a tombstone was not written by
    kiq's sweeper as it is, and deleting unguarded could delete a newer value.
    """
    try:
        headers = record.headers()
    except Exception as exc:  # confluent-kafka decodes names: a non-UTF-8 one raises
        raise BadRecord(f"record headers cannot be read: {type(exc).__name__}") from None
    if not headers:
        return None
    found: int | None = None
    seen = False
    try:
        for name, raw in headers:
            if name != EXPIRE_BELOW:
                continue
            if seen:
                raise BadRecord(f"more than one {EXPIRE_BELOW} header")
            seen = True
            found = parse_offset(raw)
            if found is None:
                raise BadRecord(f"{EXPIRE_BELOW} is not an offset: {_preview(raw)}")
    except (TypeError, ValueError) as exc:  # not a list of (name, value) pairs
        raise BadRecord(f"record headers cannot be read: {type(exc).__name__}") from None
    return found


def _preview(raw: object) -> str:
    """What a bad header holds, short enough for a log line and a dead letter's reason."""
    if isinstance(raw, bytes):
        head = raw[:_PREVIEW_BYTES]
        more = f"... ({len(raw)} bytes)" if len(raw) > _PREVIEW_BYTES else ""
        return f"{head!r}{more}"
    return type(raw).__name__

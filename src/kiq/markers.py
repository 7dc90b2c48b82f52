"""Batch markers: the record a consistent pipeline writes to every partition of a table's
topic once a micro-batch's records are all written (``ctx.write_table(consistent=True)``).

A replica that applies the marker of batch B has applied every record of batches up to
B of its partition and none of a later batch: the state there is one whole micro-batch,
so a read across partitions answered at the same B is a snapshot (``?consistent=batch``).

A marker is keyed ``MARKER_KEY`` (so compaction keeps the latest per partition) and its
value is the batch id in ASCII digits. Whoever may write the topic may write one, so
``batch_of`` parses it as untrusted: any other value under the marker's key is a bad
record, never a crash.

Its format's version (``kiq.formats.MARKER``) travels in the record's ``kiq-format`` header,
which 0.1.0 neither wrote (a marker without it is version 1) nor reads. A marker of a newer
format than this kiq reads is skipped, neither applied nor a bad record.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiq import formats

FORMAT_HEADER = "kiq-format"
HEADERS: list[tuple[str, str | bytes | None]] = [
    (FORMAT_HEADER, str(formats.MARKER).encode())
]  # what a marker is written with
MARKER_KEY = b"\x00kiq.batch"  # no key kiq's pipelines write starts with NUL
_MAX_DIGITS = 18  # a batch id below 10**18: Spark's are counted from 0, one per trigger


def marker_value(batch_id: int) -> bytes:
    """The value of batch ``batch_id``'s marker."""
    if not 0 <= batch_id < 10**_MAX_DIGITS:
        raise ValueError(f"a batch id is 0 <= id < 10**{_MAX_DIGITS}: {batch_id}")
    return str(batch_id).encode()


def batch_of(value: object) -> int | None:
    """The batch id a marker's value names, or None when it is not one."""
    if type(value) is not bytes or not 0 < len(value) <= _MAX_DIGITS or not value.isdigit():
        return None  # bytes.isdigit is ASCII digits only
    return int(value)


def format_of(headers: Sequence[tuple[str, bytes | None]] | None) -> int | None:
    """The format version a marker's Kafka headers name: ``formats.UNVERSIONED`` when they
    name none, None when its header is no version."""
    for name, value in headers or ():
        if name == FORMAT_HEADER:
            if type(value) is not bytes or not 0 < len(value) <= 6 or not value.isdigit():
                return None
            return int(value)
    return formats.UNVERSIONED

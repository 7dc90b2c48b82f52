"""Windowed tables' keys: ``ENTITY{sep}START{sep}END``, times in ISO 8601 UTC to the ms.

The pipeline writes START and END fixed-width (``kiq.pipelines.tables.WINDOW_TIME_FORMAT``),
so one entity's windows sort by start time as bytes, in the entity's partition: a time
range of one entity is one range scan. Callers give times as they like (ISO 8601 with or
without a zone, a date, epoch milliseconds); ``window_time`` writes them as keys do.
"""

from __future__ import annotations

from datetime import UTC, datetime

EXAMPLE = "2026-11-25T10:00:00Z, 2026-11-25T10:00, 2026-11-25 or epoch ms 1795600800000"


def window_time(text: str, what: str = "time") -> str:
    """``text`` as a windowed key writes times (``2026-11-25T10:00:00.000Z``); a naive time
    is UTC. ``ValueError`` naming ``what`` when it is no time."""
    text = text.strip()
    try:
        if text.isdigit():
            moment = datetime.fromtimestamp(int(text) / 1000, UTC)
        else:
            moment = datetime.fromisoformat(text.replace("z", "Z"))
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{what} {text!r} is not a time: e.g. {EXAMPLE}") from None
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def split_window_key(key: str, sep: str) -> tuple[str, str, str]:
    """(entity, start, end) of a windowed table's key."""
    head, _, end = key.rpartition(sep)
    entity, _, start = head.rpartition(sep)
    return entity, start, end

"""Windowed tables' keys: ``ENTITY{sep}START{sep}END``, times in ISO 8601 UTC to the ms.

The pipeline writes START and END fixed-width (``kiq.pipelines.tables.WINDOW_TIME_FORMAT``),
so one entity's windows sort by start time as bytes, in the entity's partition: a time
range of one entity is one range scan. Callers give times as they like (ISO 8601 with or
without a zone, a date, epoch milliseconds); ``window_time`` writes them as keys do.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

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


@dataclass(frozen=True, slots=True)
class WindowPage:
    """One entity's windows as the JSON array a page of them answers with:
    ``[{"start", "end", "value"}, ...]``, made at once as bytes (a hundred rows as a hundred
    dicts were that many objects for the collector to walk).

    ``width``: the bytes of ``ENTITY{sep}`` before each key's times; ``raw``: values are
    bytes, answered in base64 (else stored JSON, embedded as is). The same on every node,
    so the node holding a partition makes a page of it for the node a request entered
    (``kiq.peers.wire.Scan.windows``), and keeps it while the partition is unchanged
    (``kiq.routing.pages``). The times are cut from the key bytes and written as they are
    when every one is printable ASCII with no quote or backslash (the pipeline writes them
    so); else each is decoded and quoted (a key written by something else)."""

    width: int
    sep: str
    raw: bool = False

    def __call__(self, items: list[tuple[bytes, bytes]]) -> bytes:
        times = [key[self.width :] for key, _ in items]
        values = [b'"%b"' % base64.b64encode(v) if self.raw else v for _, v in items]
        if _AS_IS.fullmatch(b"".join(times)):
            cut = self.sep.encode()
            rows = []
            for time, value in zip(times, values, strict=True):
                start, _, end = time.rpartition(cut)
                rows.append(b'{"start":"%b","end":"%b","value":%b}' % (start, end, value))
        else:
            rows = []
            for (key, _), value in zip(items, values, strict=True):
                _, first, last = split_window_key(key.decode(), self.sep)
                rows.append(
                    b'{"start":%b,"end":%b,"value":%b}'
                    % (orjson.dumps(first), orjson.dumps(last), value)
                )
        return b"[" + b",".join(rows) + b"]"


# Bytes a JSON string holds as they are: printable ASCII but the quote and the backslash.
_AS_IS = re.compile(rb"[\x20\x21\x23-\x5b\x5d-\x7e]*")

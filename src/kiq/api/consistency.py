"""What a read across partitions may answer from: a position it must not go back from
(``X-Kiq-After``), and one whole micro-batch (``?consistent=batch``).

A read asks every partition it touches for its newest batch (``LATEST``); the answer
is a snapshot when they all answered as of the same one. Otherwise the oldest batch
among them is the newest every partition has applied, and the partitions that answered
as of a newer one are asked again as of that one (``redo``): at most two rounds. A
table whose pipeline writes no markers answers as it is, with no batch.

A partition none of whose replicas has applied what the caller's position names is
asked again for up to ``wait_ms`` (``waited``), else the answer is a 503 to retry (a
multiget lists its keys as unavailable).

Every such answer carries the position it read (``X-Kiq-Position``: each partition's
replica's applied offset, or its marker's when read as of a batch) and the batch it
reflects (``X-Kiq-Batch``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kiq import positions
from kiq.api.errors import BadRequest, Unavailable
from kiq.peers.wire import Source

BATCH_HEADER = b"x-kiq-batch"
POSITION_HEADER = positions.HEADER.encode()
LEVELS = ("batch",)  # ?consistent=... (absent: each partition as its replica has it)
RETRY_AFTER_S = 1  # a batch marker is written every micro-batch: one is due within ~1 s
MAX_WAIT_MS = 60_000  # as a lookup's ``wait_ms``
FIRST_PAUSE_S, LAST_PAUSE_S = 0.02, 0.25


@dataclass(frozen=True, slots=True)
class ReadAt:
    """How a read across partitions is bounded: ``consistent`` (one batch) and ``after``
    (partition → the offset its replica must have applied, from the caller's token)."""

    consistent: bool = False
    after: Mapping[int, int] = field(default_factory=dict)
    wait_ms: int = 0  # how long a partition behind ``after`` is waited for
    # The batch to answer as of, when the caller chose it: ``Tables`` reads a second table
    # of the same query as of the batch its first read reflected (``pinned``).
    batch: int | None = None


async def waited(
    at: ReadAt, behind: list[int], ask: Callable[[list[int]], Awaitable[list[int]]]
) -> list[int]:
    """The partitions of ``behind`` (none of whose replicas had applied ``at.after``)
    asked again (``ask``: those still behind) until none is, for up to ``at.wait_ms``.
    What is still behind then."""
    return await asked_again([p for p in behind if p in at.after], ask, at.wait_ms / 1000)


async def asked_again(
    behind: list[int], ask: Callable[[list[int]], Awaitable[list[int]]], wait_s: float
) -> list[int]:
    """``behind`` asked again (``ask``: those still behind) until none is, for up to
    ``wait_s``: a replica catches up within a fetch or two, so the first tries are soon
    and later ones back off. What is still behind then."""
    deadline = time.monotonic() + wait_s
    pause = FIRST_PAUSE_S
    while behind and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LAST_PAUSE_S)
        behind = await ask(behind)
    return behind


PLAIN = ReadAt()


def read_at(table: str, params: Mapping[str, str], after_header: str | None) -> ReadAt:
    """The bounds a request names: ``?consistent=batch``, ``X-Kiq-After`` or ``?after=``."""
    level = params.get("consistent")
    if level is not None and level not in LEVELS:
        raise BadRequest(
            f"consistent must be one of {', '.join(LEVELS)}: {level[:40]!r}", consistent=level
        )
    token = after_header if after_header is not None else params.get("after")
    after: dict[int, int] = {}
    if token:
        try:
            after = positions.of_table(positions.decode(token), table)
        except positions.BadPosition as exc:
            raise BadRequest(str(exc)) from None
    if level is None and not after:
        return PLAIN
    wait_ms = 0
    raw = params.get("wait_ms")
    if raw:
        if not raw.isascii() or not raw.isdigit() or len(raw) > 6 or int(raw) > MAX_WAIT_MS:
            raise BadRequest(f"wait_ms must be between 0 and {MAX_WAIT_MS}", wait_ms=raw[:20])
        wait_ms = int(raw)
    return ReadAt(level == "batch", after, wait_ms)


def pinned(at: ReadAt, sources: Iterable[Source]) -> int | None:
    """The batch a consistent read answers as of: the caller's, else ``chosen``."""
    return at.batch if at.batch is not None else chosen(sources)


def chosen(sources: Iterable[Source]) -> int | None:
    """The batch a consistent read answers as of: the oldest any partition answered as of
    (every partition has applied it); None when none answered as of one."""
    batches = [s.batch for s in sources if s.batch >= 0]
    return min(batches) if batches else None


def redo(sources: Iterable[Source], batch: int | None) -> list[int]:
    """The partitions to ask again as of ``batch``: those answered as of another."""
    if batch is None:
        return []
    return [s.partition for s in sources if s.batch != batch]


def unavailable(table: str, partitions: Iterable[int], batch: int) -> Unavailable:
    """No replica of ``partitions`` holds ``batch`` (yet, or any more): ask again."""
    missing = sorted(partitions)
    return _retry(
        f"no replica of {table} partition(s) {', '.join(map(str, missing))} holds batch {batch}",
        batch=batch,
        partitions=missing,
    )


def behind(table: str, partitions: Iterable[int], at: ReadAt) -> Unavailable:
    """No replica of ``partitions`` has applied what the caller's position names."""
    missing = sorted(partitions)
    return _retry(
        f"no replica of {table} partition(s) {', '.join(map(str, missing))} has applied the "
        "position asked yet",
        partitions=missing,
        # JSON object keys are strings: partition numbers as text
        after={str(p): at.after[p] for p in missing if p in at.after},
    )


def _retry(why: str, **details: Any) -> Unavailable:
    """A 503 that says when to ask again (``Retry-After``)."""
    error = Unavailable(f"{why}: ask again in {RETRY_AFTER_S}s", **details)
    error.headers = ((b"retry-after", str(RETRY_AFTER_S).encode()),)
    return error


def headers(table: str, sources: Iterable[Source], batch: int | None) -> dict[str, str]:
    """The answer's ``X-Kiq-Position`` (and ``X-Kiq-Batch`` when read as of one)."""
    seen = positions.at(table, ((s.partition, s.applied_offset) for s in sources))
    out = {positions.HEADER: positions.encode(seen)} if seen else {}
    if batch is not None:
        out[BATCH_HEADER.decode()] = str(batch)
    return out

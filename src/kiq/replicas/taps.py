"""What a replica just applied, told to whoever watches its partition (``kiq.live``).

The materializer thread calls a partition's tap right after a batch is stored and its
position moved: the changes in log order, and the offset the replica now holds everything
up to. Nothing is copied and nothing is looked up per record while nobody watches: one
dict lookup per applied batch. A tap runs on the materializer thread and must only hand
the batch over (``loop.call_soon_threadsafe``); it never blocks and never raises.
"""

from __future__ import annotations

from collections.abc import Callable

from kiq.stores.base import Change

# (through, changes, offsets of the changes that are TTL or retention expiries)
Tap = Callable[[int, list[Change], frozenset[int]], None]


class Taps:
    """Taps by (table, partition); set and removed on the event loop, read by the thread
    (a dict read and a dict write are atomic under the GIL)."""

    __slots__ = ("_taps",)

    def __init__(self) -> None:
        self._taps: dict[tuple[str, int], Tap] = {}

    def set(self, table: str, partition: int, tap: Tap) -> None:
        self._taps[(table, partition)] = tap

    def remove(self, table: str, partition: int) -> None:
        self._taps.pop((table, partition), None)

    def get(self, table: str, partition: int) -> Tap | None:
        return self._taps.get((table, partition)) if self._taps else None

"""The reader hands over a record as soon as it is fetched, with whatever queued behind it."""

from __future__ import annotations

from typing import Any

from kiq.kafka.reader import PartitionReader


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class _Consumer:
    def __init__(self, queued: list[_Msg]) -> None:
        self.queued = queued
        self.calls: list[tuple[str, Any]] = []

    def poll(self, timeout: float) -> _Msg | None:
        self.calls.append(("poll", timeout))
        return self.queued.pop(0) if self.queued else None

    def consume(self, num_messages: int, timeout: float) -> list[_Msg]:
        self.calls.append(("consume", timeout))
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken


def _reader(consumer: _Consumer) -> PartitionReader:
    reader = PartitionReader.__new__(PartitionReader)
    reader._consumer = consumer  # type: ignore[assignment]
    return reader


def test_waits_for_the_first_record_only_then_takes_the_queue_without_waiting():
    consumer = _Consumer([_Msg(i) for i in range(5)])
    fetched = _reader(consumer).consume(max_records=3, timeout_s=0.05)
    assert [m.offset() for m in fetched.records[("t", 0)]] == [0, 1, 2]
    assert consumer.calls == [("poll", 0.05), ("consume", 0)]


def test_nothing_fetched_is_one_wait():
    consumer = _Consumer([])
    assert not _reader(consumer).consume(timeout_s=0.05)
    assert consumer.calls == [("poll", 0.05)]

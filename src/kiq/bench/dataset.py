"""The keys and values the serving benchmarks load: stock-quote-like JSON, ~150 bytes each.

A value is a pure function of its key, so the floor (``kiq.bench.floor``) serves
byte for byte what the nodes serve without reading Kafka, and every benchmark
run loads the same data.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import orjson

from kiq.errors import KiqError
from kiq.kafka import create_topics
from kiq.kafka.records import JsonProducer

PARTITIONS = 12
TABLE = "t"
_EXCHANGES = ("NYSE", "NASDAQ", "ARCA", "BATS")


def key_of(i: int) -> str:
    """The ``i``-th benchmark key; keys at or past the loaded count are never produced."""
    return f"Q{i:07d}"


def quote(key: str) -> dict[str, object]:
    """The value of ``key``: shaped like a tick, derived from a checksum of the key."""
    h = zlib.crc32(key.encode())
    bid = 10 + (h % 50_000) / 100
    return {
        "symbol": key,
        "exchange": _EXCHANGES[h % len(_EXCHANGES)],
        "ts": 1_764_000_000_000 + h % 86_400_000,
        "bid": bid,
        "ask": round(bid + 0.02, 2),
        "bid_size": 100 * (1 + h % 9),
        "ask_size": 100 * (1 + (h >> 4) % 9),
        "last": round(bid + 0.01, 2),
        "last_size": 100 * (1 + (h >> 8) % 5),
    }


def quote_bytes(key: str) -> bytes:
    """The value of ``key`` as produced (``JsonProducer`` encodes with orjson too)."""
    return orjson.dumps(quote(key))


def load_quotes(bootstrap: str, topic: str, keys: Iterable[str]) -> dict[int, int]:
    """Create ``topic`` (12 partitions) and produce one quote per key.

    Returns the last offset written to each partition: what every replica must
    have applied before a measurement starts.
    """
    create_topics(bootstrap, {topic: PARTITIONS})
    last: dict[int, int] = {}

    def delivered(_key: str, partition: int, offset: int, _at: int) -> None:
        if offset > last.get(partition, -1):
            last[partition] = offset

    producer = JsonProducer(
        bootstrap, topic, key_field="symbol", on_delivery=delivered, linger_ms=20
    )
    for key in keys:
        producer.produce(quote(key))
    pending = producer.flush(60)
    if pending or producer.failed:
        raise KiqError(
            f"loading {topic}: {pending} records unacknowledged, {producer.failed} failed "
            f"({producer.last_error}); see the broker log"
        )
    return last

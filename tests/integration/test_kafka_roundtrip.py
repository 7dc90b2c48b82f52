"""Keyed records through the real broker with kiq's producer settings."""

from __future__ import annotations

from kiq.kafka import topic_partitions
from kiq.partitioning import partition_for
from tests.integration.kafka_io import drain, produce

RECORDS = 10_000
PARTITIONS = 6


def test_ten_thousand_keyed_records_round_trip(bootstrap, make_topic):
    topic = make_topic("roundtrip", partitions=PARTITIONS)
    assert topic_partitions(bootstrap, topic) == PARTITIONS
    sent = {f"user-{i:05d}": f'{{"n": {i}}}' for i in range(RECORDS)}

    placed = produce(bootstrap, topic, sent.items())
    records = drain(bootstrap, topic, expected=RECORDS)

    assert len(records) == RECORDS
    received = {r.key.decode(): r.value.decode() for r in records}
    assert received == sent
    for r in records:
        key = r.key.decode()
        assert r.partition == placed[key] == partition_for(key, PARTITIONS)
    # Offsets are dense per partition: nothing lost, nothing duplicated.
    for p in range(PARTITIONS):
        offsets = sorted(r.offset for r in records if r.partition == p)
        assert offsets == list(range(len(offsets)))


def test_missing_topic_is_reported(bootstrap):
    assert topic_partitions(bootstrap, "no-such-topic") is None

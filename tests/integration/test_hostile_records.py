"""A hostile table record against a real broker and a real `kiq serve`: skipped alone.

A tombstone whose ``kiq.expire-below`` has 5,000 digits (``int()`` of it raises) sits
in the middle of a table's partition, with valid records after it in that partition,
in the table's other partitions and in another table's. The node serves every valid
record, keeps the key the hostile tombstone names, sends that one record to its dead
letters with the reason, and is ready (no replica faulted).
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer

from kiq.kafka import create_topics, producer_config
from kiq.partitioning import partition_for
from kiq.replicas.aging import EXPIRE_BELOW
from tests.integration import test_serving
from tests.integration.kafka_io import drain
from tests.integration.test_serving import end_offsets, multiget, wait_applied

pytestmark = pytest.mark.integration
make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes

PARTITIONS = 3


def owner(key: str) -> int:
    return partition_for(key, PARTITIONS)


def test_a_5000_digit_expire_below_is_dead_lettered_and_every_other_record_served(
    bootstrap, make_topic, make_cluster
):
    aging = make_topic("hostile-aging", partitions=PARTITIONS)
    plain = make_topic("hostile-plain", partitions=PARTITIONS)
    letters = f"hostile-letters-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {letters: 1})
    producer = Producer(producer_config(bootstrap))
    valid: dict[str, list[str]] = {"t": [], "u": []}

    def write(topic: str, table: str, key: str) -> None:
        value = json.dumps({"k": key})
        producer.produce(topic, key=key.encode(), value=value, partition=owner(key))
        valid[table].append(key)

    # Written before the node starts: its restore reads them in the same fetches.
    write(aging, "t", "victim")
    hostile = [(EXPIRE_BELOW, b"9" * 5000)]
    producer.produce(aging, key=b"victim", value=None, partition=owner("victim"), headers=hostile)
    for i in range(150):  # some in every partition, the victim's included
        write(aging, "t", f"t-{i}")
        write(plain, "u", f"u-{i}")
    assert producer.flush(30) == 0

    cluster = make_cluster(
        [f"t={aging},ttl=1h,store=memory", f"u={plain},store=memory"],
        nodes=1,
        extra_env={"KIQ_SERVE_DEAD_LETTER_TOPIC": letters},
    )
    wait_applied(cluster, "t", end_offsets(bootstrap, aging, PARTITIONS))
    wait_applied(cluster, "u", end_offsets(bootstrap, plain, PARTITIONS))
    [url] = cluster.live_urls()
    for table, keys in valid.items():
        got = multiget(url, table, keys)
        assert got["missing"] == [], (table, got["missing"][:5])
    [letter] = drain(bootstrap, letters, expected=1, timeout_s=30)
    assert letter.key == b"victim" and letter.value is None
    assert letter.headers["kiq.source.topic"] == aging.encode()
    assert letter.headers["kiq.source.partition"] == b"%d" % owner("victim")
    assert letter.headers["kiq.source.offset"] == b"1"
    assert EXPIRE_BELOW.encode() in letter.headers["kiq.reason"]
    cluster.nodes["n1"].wait_ready(10)  # no replica faulted: the node stays ready

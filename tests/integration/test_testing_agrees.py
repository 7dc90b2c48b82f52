"""kiq.testing agrees with kiq: one pipeline, run for real and through ``run_pipeline``.

The pipelines guide's orders pipeline (docs/guides/pipelines.md: a one-column-key table, a
composite-key table, a ``reject`` condition) runs as ``kiq pipeline run`` runs it, a
streaming driver reading a broker, and through ``kiq.testing.run_pipeline`` on the same
records in the same order: records that
are not JSON, lack a NOT NULL field, fail the rejection or have no value, and a customer
whose name holds the key separator. Every key and value of both tables, the partition of
each key's record, every dead letter (topic, key, value, reason and kiq's other headers)
and the catalog declarations must be the same.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from kiq.catalog import CATALOG_TOPIC
from kiq.kafka import (
    compacted,
    consumer_config,
    create_topics,
    producer_config,
    topic_partitions,
)
from kiq.runtime.pipelines import LocalPipeline
from kiq.tables.declared import Declared, decode_catalog
from kiq.testing import Run, run_pipeline
from kiq.testing._session import stop_session
from tests.integration.test_user_pipeline import BAD, START_MS, guide_example, make_orders

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 6
# Where the example names its topics: renamed for this test.
CALLS = (("read", "orders"), ("write_table", "customer-totals"), ("write_table", "orders-by-time"))


@pytest.fixture(scope="module", autouse=True)
def _stop_kiq_testing_spark() -> Iterator[None]:
    yield
    stop_session()


def _comparable(declared: Declared) -> Declared:
    """``declared`` with its value fields' names and types alone."""
    if declared.value_fields is None:
        return declared
    fields = tuple(msgspec.structs.replace(f, nullable=True) for f in declared.value_fields)
    return msgspec.structs.replace(declared, value_fields=fields)


def pipeline_file(tmp_path: Path, suffix: str) -> tuple[Path, dict[str, str]]:
    """The guide's example with topics of this test's own (the broker is the session's)."""
    names = {n: f"{n}-{suffix}" for n in ("orders", "customer-totals", "orders-by-time")}
    code = guide_example()
    for call, name in CALLS:
        text = f'ctx.{call}("{name}"'
        assert code.count(text) == 1
        code = code.replace(text, f'ctx.{call}("{names[name]}"')
    path = tmp_path / "orders_pipeline.py"
    path.write_text(code)
    return path, names


def records(rng: random.Random) -> list[tuple[str, str | None]]:
    orders = make_orders(rng, 240)
    separator = {"order_id": "o-sep", "customer": "x|y", "amount": 1.25, "ts": START_MS}
    rows: list[tuple[str, str | None]] = [(o["customer"], json.dumps(o)) for o in orders[:120]]
    rows += [(key, value) for key, value, _ in BAD]  # not JSON, no amount, amount <= 0
    rows += [("x|y", json.dumps(separator)), ("cust-04", None)]  # a separator, no value
    rows += [(o["customer"], json.dumps(o)) for o in orders[120:]]
    return rows


def produce(bootstrap: str, topic: str, rows: list[tuple[str, str | None]]) -> None:
    """In order, by kiq's producer settings (murmur2, idempotent: each partition in order)."""
    producer = Producer(producer_config(bootstrap))
    errors: list[str] = []
    for key, value in rows:
        producer.produce(
            topic,
            key=key.encode(),
            value=None if value is None else value.encode(),
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


class Topics:
    """What the real run wrote, read as it comes: each topic's records in partition order."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self._consumer = Consumer(consumer_config(bootstrap, f"agree-{uuid.uuid4().hex}"))
        self._consumer.subscribe(topics)
        self.records: dict[str, list[Any]] = {t: [] for t in topics}

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self._consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                self.records[msg.topic()].append(msg)

    def table(self, topic: str) -> tuple[dict[str, Any], dict[str, int]]:
        """The topic's final state by key, and the partition of each key's records."""
        state: dict[str, Any] = {}
        where: dict[str, int] = {}
        for msg in sorted(self.records[topic], key=lambda m: (m.partition(), m.offset())):
            key = msg.key().decode()
            assert where.setdefault(key, msg.partition()) == msg.partition()
            if msg.value() is None:
                state.pop(key, None)
            else:
                state[key] = json.loads(msg.value())
        return state, where

    def letters(self, topic: str) -> Counter[tuple[Any, ...]]:
        return Counter(
            _letter(topic, m.key(), m.value(), {k: v.decode() for k, v in m.headers() or []})
            for m in self.records[topic]
        )

    def close(self) -> None:
        self._consumer.close()


def _letter(topic: str, key: bytes | None, value: bytes | None, headers: dict[str, str]) -> tuple:
    return (topic, key, value, tuple(sorted(headers.items())))


def expected_letters(run: Run, topic: str) -> Counter[tuple[Any, ...]]:
    return Counter(
        _letter(r.topic, r.key, r.value, dict(r.headers)) for r in run.topics.get(topic, [])
    )


def test_run_pipeline_computes_what_the_streaming_pipeline_writes(bootstrap: str, tmp_path: Path):
    example, names = pipeline_file(tmp_path, uuid.uuid4().hex[:8])
    orders, totals, by_time = names["orders"], names["customer-totals"], names["orders-by-time"]
    rows = records(random.Random(29))

    started = time.monotonic()
    run = run_pipeline(f"{example}:build", {orders: rows}, partitions=PARTITIONS)
    took = time.monotonic() - started

    letter_topics = [f"{orders}-dlq", f"{by_time}-dlq", f"{totals}-dlq"]
    assert {t: len(run.topics.get(t, [])) for t in letter_topics} == {
        letter_topics[0]: 4,  # not JSON, no amount, amount <= 0, no value
        letter_topics[1]: 1,  # x|y: its key part holds the separator
        letter_topics[2]: 0,
    }
    assert "x|y" in run.tables[totals]  # a one-column key: no separator to hold
    assert len(run.tables[by_time]) == 240

    create_topics(bootstrap, {orders: PARTITIONS})
    produce(bootstrap, orders, rows)
    pipeline = LocalPipeline(
        (f"{example}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    topics: Topics | None = None
    try:
        pipeline.start()
        deadline = time.monotonic() + 300
        wanted = [totals, by_time, *letter_topics]
        while any(topic_partitions(bootstrap, t) is None for t in wanted):  # it makes them
            assert time.monotonic() < deadline and pipeline.running, "no topics made"
            time.sleep(0.5)
        topics = Topics(bootstrap, wanted)
        while True:
            topics.poll(2.0)
            done = all(topics.table(t)[0] == run.tables[t] for t in (totals, by_time)) and all(
                topics.letters(t) == expected_letters(run, t) for t in letter_topics
            )
            if done or time.monotonic() > deadline:
                break
            assert pipeline.running, (tmp_path / "pipeline.log").read_text()[-3000:]
        topics.poll(2.0)  # nothing more arrives: a duplicate would show here
    finally:
        pipeline.stop()
        if topics is not None:
            topics.close()

    for table in (totals, by_time):
        state, where = topics.table(table)
        assert state == run.tables[table], table
        written = {r.key.decode(): r.partition for r in run.topics[table] if r.key is not None}
        assert where == written, table
    for topic in letter_topics:
        assert topics.letters(topic) == expected_letters(run, topic), topic
    catalog = decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC))
    # The same declarations, but a real run records where it checkpoints, and Spark types a
    # streaming aggregate's columns nullable where a batch plan knows better (count(*)).
    recorded = [
        _comparable(msgspec.structs.replace(catalog[d.name], checkpoint="")) for d in run.declared
    ]
    assert recorded == [_comparable(d) for d in run.declared]
    assert all(catalog[d.name].checkpoint for d in run.declared)
    print(f"run_pipeline: {took:.1f} s for {len(rows)} records")

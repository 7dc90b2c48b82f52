"""The bank pipeline (tests/integration/bank) on the test session: random transfers among
1,000 accounts, summed per account by a consistent query in 1-second micro-batches. Read from
the table's log alone, every partition at the same batch's marker, the balances sum to 0 at
every batch, and the last batch holds exactly what every transfer sent adds up to. Partitions
taken at different batches do not sum to 0: what the markers are for."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from tests.integration.bank.feed import balances, feed
from tests.integration.bank.ledger import common_batches, read_log, state_at, table_at
from tests.integration.bank.pipeline import INTERVAL, PARTITIONS, bank

pytestmark = pytest.mark.spark

ROUNDS = 4


def _total(table: dict[bytes, bytes]) -> int:
    return sum(json.loads(v)["balance"] for v in table.values())


def test_the_balances_sum_to_zero_at_every_batch(spark, bootstrap, make_topic, checkpoint):
    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions

    transfers = make_topic("transfers", partitions=PARTITIONS)
    accounts = f"{transfers}-accounts"
    opts = StreamOptions(
        bootstrap=bootstrap, checkpoint_root=checkpoint, trigger="microbatch", interval=INTERVAL
    )
    ctx = Context(spark, opts, "bank")
    bank(ctx, transfers, accounts)
    (query,) = ctx.queries
    try:
        started = time.monotonic()
        sent = []
        for r in range(ROUNDS):  # each round in one batch or more
            sent += feed(bootstrap, transfers, count=500, rate=500, max_seconds=30, seed=r)
            query.processAllAvailable()
        took = time.monotonic() - started
    finally:
        query.stop()

    logs = read_log(bootstrap, accounts)
    assert len(logs) == PARTITIONS
    batches = common_batches(logs)
    assert len(batches) >= ROUNDS, f"{len(batches)} batches in {took:.0f}s"
    for b in batches:
        assert _total(table_at(logs, b)) == 0, f"batch {b}"
    final = table_at(logs, batches[-1])
    assert {k.decode(): json.loads(v)["balance"] for k, v in final.items()} == balances(sent)

    # Partition 0 a batch behind the others: a read without markers can see that.
    torn = []
    for older, newer in itertools.pairwise(batches):
        mixed = table_at(logs, newer)
        behind = state_at(logs[0], older) or {}
        for key in state_at(logs[0], newer) or {}:
            mixed.pop(key)
        torn.append(_total(mixed | behind))
    assert any(t != 0 for t in torn), torn

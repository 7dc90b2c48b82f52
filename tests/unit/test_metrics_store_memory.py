"""A node's /metrics shows what its stores' memory budget holds."""

from __future__ import annotations

from prometheus_client import generate_latest

from kiq.metrics import NodeMetrics
from kiq.stores import MemoryBudget


def test_store_memory_is_read_from_the_budget_at_each_scrape():
    metrics = NodeMetrics()
    usage = [(3 * 2**20, 2**20)]
    metrics.watch_store_memory(lambda: usage[0], 128 * 2**20)
    text = generate_latest(metrics.registry).decode()
    assert 'kiq_store_memory_bytes{kind="used"} 3.145728e+06' in text
    assert 'kiq_store_memory_bytes{kind="memtables"} 1.048576e+06' in text
    assert "kiq_store_memory_budget_bytes 1.34217728e+08" in text
    usage[0] = (5 * 2**20, 0)
    assert (
        'kiq_store_memory_bytes{kind="used"} 5.24288e+06'
        in generate_latest(metrics.registry).decode()
    )


def test_a_budget_reports_through_it():
    metrics, budget = NodeMetrics(), MemoryBudget()
    metrics.watch_store_memory(budget.usage, budget.total_bytes)
    text = generate_latest(metrics.registry).decode()
    assert 'kiq_store_memory_bytes{kind="used"} 0.0' in text

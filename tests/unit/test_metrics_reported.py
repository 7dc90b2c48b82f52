"""A node's /metrics counts its read workers' answers too, and never counts down."""

from __future__ import annotations

from prometheus_client import generate_latest

from kiq.metrics import NodeMetrics, RouteStats
from kiq.workers.state import report_of, take_report


def _gets(metrics: NodeMetrics) -> float:
    text = generate_latest(metrics.registry).decode()
    line = next(x for x in text.splitlines() if x.startswith('kiq_requests_total{route="get"'))
    return float(line.rsplit(" ", 1)[1])


def test_what_workers_report_is_summed_with_the_nodes_own():
    node, worker = NodeMetrics(), NodeMetrics()
    node.route("get").record(200, 0.001)
    for _ in range(3):
        worker.route("get").record(200, 0.002)
    worker.hedges.lookups = 5
    take_report(report_of(1, 100, worker), node)
    assert _gets(node) == 4
    text = generate_latest(node.registry).decode()
    assert "kiq_forward_lookups_total 5.0" in text
    worker.route("get").record(200, 0.002)
    take_report(report_of(1, 100, worker), node)  # the same worker: its latest counts
    assert _gets(node) == 5


def test_a_worker_started_again_does_not_take_its_predecessors_counts_away():
    node, first, second = NodeMetrics(), NodeMetrics(), NodeMetrics()
    for _ in range(10):
        first.route("get").record(200, 0.001)
    take_report(report_of(1, 100, first), node)
    second.route("get").record(200, 0.001)
    take_report(report_of(1, 200, second), node)  # index 1 again, another process
    assert _gets(node) == 11


def test_route_stats_add_up():
    a, b = RouteStats(), RouteStats()
    a.record(200, 0.001)
    b.record(404, 0.5)
    a.add(b)
    assert a.statuses == {200: 1, 404: 1} and sum(a.buckets) == 2


def test_forwarded_reads_are_counted_by_outcome():
    metrics = NodeMetrics()
    metrics.forwards.ok += 2
    metrics.forwards.failed += 1
    text = generate_latest(metrics.registry).decode()
    assert 'kiq_forwards_total{outcome="ok"} 2.0' in text
    assert 'kiq_forwards_total{outcome="failed"} 1.0' in text

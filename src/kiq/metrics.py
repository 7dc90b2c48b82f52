"""Prometheus metrics of one node, in a registry of its own.

Counters and histograms are updated where things happen; gauges that mirror
state (lag, offsets, store sizes, replica states) are read at scrape time by a
collector, so the hot paths never update them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kiq_requests", "HTTP requests answered", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "kiq_request_seconds", "HTTP request latency", ["route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.forwards = Counter(
            "kiq_forwards", "requests forwarded to another node", ["outcome"], registry=r
        )
        self.records_applied = Counter(
            "kiq_records_applied", "records applied to local stores", ["table"], registry=r
        )
        self.dead_letters = Counter(
            "kiq_dead_letters", "malformed records sent to the dead-letter topic", ["table"],
            registry=r,
        )  # fmt: skip

    def watch_replicas(self, replicas: Callable[[], Iterable[object]]) -> None:
        self.registry.register(_ReplicaCollector(replicas))


class _ReplicaCollector(Collector):
    def __init__(self, replicas: Callable[[], Iterable[object]]) -> None:
        self._replicas = replicas

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["table", "partition", "role"]
        lag = GaugeMetricFamily("kiq_replica_lag", "records behind the log end", labels=labels)
        applied = GaugeMetricFamily(
            "kiq_replica_applied_offset", "last applied offset", labels=labels
        )
        restored = GaugeMetricFamily(
            "kiq_replica_restored_records",
            "records applied since the replica opened",
            labels=labels,
        )
        ready = GaugeMetricFamily(
            "kiq_replica_ready", "1 when caught up and serving", labels=labels
        )
        keys = GaugeMetricFamily("kiq_store_keys", "approximate keys in the store", labels=labels)
        size = GaugeMetricFamily("kiq_store_bytes", "approximate store size", labels=labels)
        for r in list(self._replicas()):
            lv = [r.table, str(r.partition), r.role.value]
            lag.add_metric(lv, r.lag)
            applied.add_metric(lv, r.applied_offset)
            restored.add_metric(lv, r.restored)
            ready.add_metric(lv, 1 if r.state.serving else 0)
            keys.add_metric(lv, r.store.count())
            size.add_metric(lv, r.store.size_bytes())
        yield from (lag, applied, restored, ready, keys, size)

"""Prometheus metrics of one node, in a registry of its own.

Counters and histograms are updated where things happen; gauges that mirror
state (lag, offsets, store sizes, replica states) are read at scrape time by a
collector, so the hot paths never update them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _Named(Protocol):
    @property
    def value(self) -> str: ...


class _Serving(Protocol):
    @property
    def serving(self) -> bool: ...


class _Sized(Protocol):
    def count(self) -> int: ...

    def size_bytes(self) -> int: ...


class WatchedReplica(Protocol):
    """What a scrape reads of a replica: a protocol, so metrics sits below the replicas
    and every layer can report into it."""

    @property
    def table(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def role(self) -> _Named: ...
    @property
    def state(self) -> _Serving: ...
    @property
    def store(self) -> _Sized: ...
    @property
    def lag(self) -> int: ...
    @property
    def applied_offset(self) -> int: ...
    @property
    def restored(self) -> int: ...


class RouteStats:
    """Request counts and a latency histogram for one route, in plain ints.

    The lookup path is the product: prometheus_client's locked counters and its
    histogram cost several microseconds a request, these a fraction of one. Only
    the event loop thread writes them; the scrape reads them.
    """

    __slots__ = ("buckets", "statuses", "sum")

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def record(self, status: int, seconds: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    def add(self, other: RouteStats) -> None:
        for status, count in list(other.statuses.items()):
            self.statuses[status] = self.statuses.get(status, 0) + count
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.sum += other.sum


class ForwardCounts:
    """Reads this node forwarded, answered (``ok``) or not (``failed``), in plain ints
    as ``RouteStats``: one is counted for each forwarded lookup."""

    __slots__ = ("failed", "ok")

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0


class _Seconds(Protocol):
    @property
    def seconds(self) -> float: ...


class HedgeStats:
    """Hedged forwarding (``peers/hedging.py``) in plain ints, as ``RouteStats``.

    ``lookups`` forwarded; ``hedged`` extra lookups sent because the first target
    was slower than the delay (``to_local`` of them answered from this node's own
    replica); ``won`` hedges answered first, ``lost`` the first target answered
    first anyway. ``hedged / lookups`` is the extra load hedging costs.
    """

    __slots__ = (
        "delay",
        "hedged",
        "lookups",
        "lost",
        "probes",
        "skipped",
        "suspected",
        "to_local",
        "won",
    )

    def __init__(self) -> None:
        self.lookups = 0
        self.hedged = 0
        self.skipped = 0  # hedges due but over the budget, not sent
        self.to_local = 0
        self.won = 0
        self.lost = 0
        self.suspected = 0  # peers put last for losing races without answering
        self.probes = 0  # requests sent to such peers to see them answer again
        self.delay: _Seconds | None = None

    def counts(self) -> list[int]:
        """The counters, in ``__slots__`` order less ``delay`` (a read worker's report)."""
        return [getattr(self, name) for name in _HEDGE_COUNTS]

    def add(self, counts: list[int]) -> None:
        for name, count in zip(_HEDGE_COUNTS, counts, strict=False):
            setattr(self, name, getattr(self, name) + count)


_HEDGE_COUNTS = tuple(name for name in HedgeStats.__slots__ if name != "delay")


class Reported:
    """The counters of a node's read workers (``kiq.workers``), as each last reported
    them: a node's /metrics counts every process answering its port. A worker started
    again reports from zero, so what its predecessor counted is kept (``retire``) and
    the sums never go down."""

    def __init__(self) -> None:
        self.by_worker: dict[int, tuple[int, dict[str, RouteStats], list[int]]] = {}
        self.retired_routes: dict[str, RouteStats] = {}
        self.retired_hedges = HedgeStats()

    def report(
        self, worker: int, pid: int, routes: dict[str, RouteStats], hedges: list[int]
    ) -> None:
        last = self.by_worker.get(worker)
        if last is not None and last[0] != pid:
            for name, stats in last[1].items():
                self.retired_routes.setdefault(name, RouteStats()).add(stats)
            self.retired_hedges.add(last[2])
        self.by_worker[worker] = (pid, routes, hedges)

    def routes(self) -> Iterable[tuple[str, RouteStats]]:
        yield from list(self.retired_routes.items())
        for _, routes, _ in list(self.by_worker.values()):
            yield from routes.items()

    def hedges(self) -> Iterable[list[int]]:
        yield self.retired_hedges.counts()
        for _, _, hedges in list(self.by_worker.values()):
            yield hedges


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.routes: dict[str, RouteStats] = {}
        self.reported = Reported()
        r.register(_RouteCollector(self.routes, self.reported))
        self.hedges = HedgeStats()
        r.register(_HedgeCollector(self.hedges, self.reported))
        self.forwards = ForwardCounts()
        r.register(_ForwardCollector(self.forwards))
        # The window pages this process keeps (kiq.routing.pages): (hits, misses, bytes).
        self.window_pages: Callable[[], tuple[int, int, int]] | None = None
        r.register(_PagesCollector(self))
        self.records_applied = Counter(
            "kiq_records_applied", "records applied to local stores", ["table"], registry=r
        )
        self.dead_letters = Counter(
            "kiq_dead_letters",
            "malformed records sent to the dead-letter topic",
            ["table"],
            registry=r,
        )

        # Tables that age (kiq.replicas.expiry): tombstones written by this node's sweeps,
        # keys its sweeps read, and the time they took.
        self.keys_expired = Counter(
            "kiq_keys_expired", "aged-out keys this node tombstoned", ["table"], registry=r
        )
        self.expiry_scanned = Counter(
            "kiq_expiry_scanned_keys", "keys read by expiry sweeps", ["table"], registry=r
        )
        self.expiry_seconds = Counter(
            "kiq_expiry_sweep_seconds", "time spent in expiry sweeps", ["table"], registry=r
        )

    def route(self, name: str) -> RouteStats:
        return self.routes.setdefault(name, RouteStats())

    def route_totals(self) -> dict[str, RouteStats]:
        """Each route's counts in every process answering this node's port: its own and
        its read workers' (what /metrics and the dashboard show)."""
        return summed_routes(self.routes, self.reported)

    def watch_replicas(self, replicas: Callable[[], Iterable[WatchedReplica]]) -> None:
        self.registry.register(_ReplicaCollector(replicas))

    def watch_store_memory(self, usage: Callable[[], tuple[int, int]], budget_bytes: int) -> None:
        """The stores' shared RocksDB memory at each scrape: ``usage`` is
        ``MemoryBudget.usage`` (used, of which memtables). A node's memory grows until
        this fills its budget; what grows beyond it is not RocksDB's cache."""
        self.registry.register(_StoreMemoryCollector(usage, budget_bytes))


def summed_routes(routes: dict[str, RouteStats], reported: Reported) -> dict[str, RouteStats]:
    summed: dict[str, RouteStats] = {}
    for name, own in [*list(routes.items()), *reported.routes()]:
        summed.setdefault(name, RouteStats()).add(own)
    return summed


class _RouteCollector(Collector):
    def __init__(self, routes: dict[str, RouteStats], reported: Reported) -> None:
        self._routes = routes
        self._reported = reported

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "kiq_requests", "HTTP requests answered", labels=["route", "status"]
        )
        latency = HistogramMetricFamily(
            "kiq_request_seconds", "HTTP request latency", labels=["route"]
        )
        for name, stats in summed_routes(self._routes, self._reported).items():
            for status, count in list(stats.statuses.items()):
                requests.add_metric([name, str(status)], count)
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), stats.buckets, strict=True):
                cumulative += count
                buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
            latency.add_metric([name], buckets, stats.sum)
        yield requests
        yield latency


class _ForwardCollector(Collector):
    def __init__(self, counts: ForwardCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            "kiq_forwards", "requests forwarded to another node", labels=["outcome"]
        )
        family.add_metric(["ok"], self._counts.ok)
        family.add_metric(["failed"], self._counts.failed)
        yield family


class _PagesCollector(Collector):
    def __init__(self, metrics: NodeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        figures = self._metrics.window_pages
        if figures is None:
            return
        hits, misses, size = figures()
        pages = CounterMetricFamily(
            "kiq_window_pages",
            "pages of a key's windows asked of this node: kept, or read and made",
            labels=["result"],
        )
        pages.add_metric(["hit"], hits)
        pages.add_metric(["miss"], misses)
        yield pages
        yield GaugeMetricFamily(
            "kiq_window_page_bytes", "bytes of the window pages kept", value=size
        )


class _HedgeCollector(Collector):
    def __init__(self, stats: HedgeStats, reported: Reported) -> None:
        self._stats = stats
        self._reported = reported

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        s = HedgeStats()
        s.add(self._stats.counts())
        for counts in self._reported.hedges():
            s.add(counts)
        s.delay = self._stats.delay
        yield CounterMetricFamily(
            "kiq_forward_lookups", "point lookups forwarded to another node", value=s.lookups
        )
        hedges = CounterMetricFamily(
            "kiq_forward_hedges",
            "extra lookups sent because the first target was slow, by target",
            labels=["to"],
        )
        hedges.add_metric(["peer"], s.hedged - s.to_local)
        hedges.add_metric(["local"], s.to_local)
        yield hedges
        yield CounterMetricFamily(
            "kiq_forward_hedges_skipped",
            "hedges due but not sent: over the budget of hedges per forwarded lookup",
            value=s.skipped,
        )
        outcomes = CounterMetricFamily(
            "kiq_forward_hedge_outcomes",
            "hedged lookups: won (a hedge answered first) or lost (the first target did)",
            labels=["outcome"],
        )
        outcomes.add_metric(["won"], s.won)
        outcomes.add_metric(["lost"], s.lost)
        yield outcomes
        yield CounterMetricFamily(
            "kiq_peer_suspected", "peers avoided for losing races without answering", s.suspected
        )
        yield CounterMetricFamily(
            "kiq_peer_probes", "probes sent to avoided peers until they answer", value=s.probes
        )
        if s.delay is not None:
            yield GaugeMetricFamily(
                "kiq_forward_hedge_delay_seconds",
                "how long a forwarded lookup waits before it is hedged",
                value=s.delay.seconds,
            )


class _ReplicaCollector(Collector):
    def __init__(self, replicas: Callable[[], Iterable[WatchedReplica]]) -> None:
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


class _StoreMemoryCollector(Collector):
    def __init__(self, usage: Callable[[], tuple[int, int]], budget_bytes: int) -> None:
        self._usage = usage
        self._budget_bytes = budget_bytes

    def collect(self) -> Iterable[GaugeMetricFamily]:
        used, memtables = self._usage()
        memory = GaugeMetricFamily(
            "kiq_store_memory_bytes",
            "RocksDB memory of the node's stores: the block cache with the memtables "
            "charged to it (used), and the memtables alone",
            labels=["kind"],
        )
        memory.add_metric(["used"], used)
        memory.add_metric(["memtables"], memtables)
        yield memory
        yield GaugeMetricFamily(
            "kiq_store_memory_budget_bytes",
            "the stores' memory budget ([serve] store_memory_mb)",
            value=self._budget_bytes,
        )

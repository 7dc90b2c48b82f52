"""The expiry sweeper: one thread per node that ages out keys of tables with a TTL or retention.

Each sweep interval, for every table that ages, it

1. raises each local replica's TTL cutoff (``Aging.below``) to the first offset the
   partition's log holds at or after ``now - ttl`` (``kiq.kafka.times``): from then on
   the replica's readers treat older entries as absent, active and standby alike;
2. sweeps each partition this node is active for: reads the store in chunks
   (``chunk`` keys, a pause between chunks, so neither the materializer nor a reader
   waits on it), and writes a guarded tombstone (``replicas.aging``) to the table's
   topic for each key that aged out, in that partition, so compaction removes the key
   and a restoring node never brings it back; the materializer then deletes it on
   every replica. A windowed table's pass also moves the partition's clock (its
   newest window end), which a standby learns by one pass of its own.

A key whose guarded tombstone met a newer value (written after the pass read it)
keeps that value on every replica, but the log's last record for it is the
tombstone, which compaction keeps over the value: the active node writes the value
again (tables whose stored value is the record's own bytes: JSON and raw).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from kiq.errors import StoreClosedError
from kiq.kafka.times import LogTimes
from kiq.metrics import NodeMetrics
from kiq.replicas.aging import EXPIRE_BELOW, WINDOW_TIME_BYTES, Aging
from kiq.replicas.reads import entries, get
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState
from kiq.tables import TableRuntime

log = logging.getLogger(__name__)

# (topic, partition, key, value or None, headers)
Outgoing = tuple[str, int, bytes, bytes | None, list[tuple[str, str | bytes | None]] | None]

CHUNK_KEYS = 1000
CHUNK_PAUSE_S = 0.002
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 60.0


class TombstoneSink(Protocol):
    """Where tombstones go: the node's producer (``kiq.node_build.LogWriter``)."""

    def send_all(self, records: Sequence[Outgoing]) -> None:
        """Returns once the broker has every record; raises when it has not."""
        ...


def sweep_interval_s(ttl_ms: int | None, retention_ms: int | None, setting_s: float = 0.0) -> float:
    """The setting when given (not 0), else a tenth of the shorter duration, 1 to 60 s."""
    if setting_s > 0:
        return setting_s
    shortest = min(ms for ms in (ttl_ms, retention_ms) if ms is not None)
    return min(max(shortest / 10_000, MIN_INTERVAL_S), MAX_INTERVAL_S)


class ExpirySweeper:
    """Ages out the keys of every local replica of ``tables`` that age; see the docstring."""

    def __init__(
        self,
        tables: Mapping[str, TableRuntime],
        replicas: Mapping[tuple[str, int], Replica],
        times: LogTimes,
        sink: TombstoneSink,
        metrics: NodeMetrics,
        interval_s: float = 0.0,
        chunk: int = CHUNK_KEYS,
        pause_s: float = CHUNK_PAUSE_S,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._tables = {
            name: t
            for name, t in tables.items()
            if t.spec.ttl_ms is not None or t.spec.retention_ms is not None
        }
        self._replicas = replicas
        self._times = times
        self._sink = sink
        self._metrics = metrics
        self._intervals = {
            name: sweep_interval_s(t.spec.ttl_ms, t.spec.retention_ms, interval_s)
            for name, t in self._tables.items()
        }
        self._setting_s = interval_s
        self._chunk = chunk
        self._pause_s = pause_s
        self._now_ms = now_ms
        self._stop = threading.Event()
        self._started = False
        self._thread = threading.Thread(target=self._run, name="kiq-expiry", daemon=True)

    @property
    def needed(self) -> bool:
        return bool(self._tables)

    def start(self) -> None:
        self._started = True
        if self._tables:
            self._thread.start()

    def add_table(self, runtime: TableRuntime) -> None:
        """Age ``runtime``'s keys too, if it ages (a version added while the node runs)."""
        spec = runtime.spec
        if spec.ttl_ms is None and spec.retention_ms is None:
            return
        self._intervals = {
            **self._intervals,
            spec.name: sweep_interval_s(spec.ttl_ms, spec.retention_ms, self._setting_s),
        }
        self._tables = {**self._tables, spec.name: runtime}
        if self._started and not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def drop_table(self, name: str) -> None:
        self._tables = {n: t for n, t in self._tables.items() if n != name}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._times.close()

    def _run(self) -> None:
        due: dict[str, float] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            tables = self._tables  # replaced, never changed, as versions come and go
            for name in tables:
                if due.setdefault(name, 0.0) <= now:
                    try:
                        self.sweep(name)
                    except Exception:  # keep aging; an operator sees the stack in the log
                        log.exception("expiry sweep failed table=%s; retrying", name)
                    due[name] = time.monotonic() + self._intervals[name]
            nearest = min((due[n] for n in tables), default=time.monotonic() + 1.0)
            self._stop.wait(max(0.05, nearest - time.monotonic()))

    # -- one interval ---------------------------------------------------------------

    def sweep(self, table: str) -> None:
        """One interval of ``table``: refresh the cutoffs, then a pass over each partition."""
        if table not in self._tables:
            return  # retired since
        runtime = self._tables[table]
        spec = runtime.spec
        replicas = [
            r
            for (name, _), r in list(self._replicas.items())
            if name == table and r.aging is not None and r.state is not ReplicaState.REVOKED
        ]
        if not replicas:
            return
        # A replica that has not applied the log up to where the cutoff was asked may hold
        # an old write of a key whose newer one it has not applied yet: it is not swept
        # (its readers already hide the old write), so its tombstones race nothing.
        behind: set[int] = set()
        if spec.ttl_ms is not None:
            since = self._now_ms() - spec.ttl_ms
            cutoffs = self._times.first_offsets_since(
                spec.topic, sorted({r.partition for r in replicas}), since
            )
            for r in replicas:
                found = cutoffs.get(r.partition)
                if found is not None and r.aging is not None:
                    r.aging.raise_below(found[0])
                    if r.position < found[1]:
                        behind.add(r.partition)
        for r in replicas:
            aging = r.aging
            if aging is None or self._stop.is_set():
                continue
            if r.state is ReplicaState.ACTIVE:
                self._rewrite_raced(runtime, r, aging)
                if r.partition not in behind:
                    self.sweep_partition(runtime, r, aging, write=True)
            elif aging.retention_ms is not None and not aging.newest_end and r.state.serving:
                aging.raced.clear()
                self.sweep_partition(runtime, r, aging, write=False)  # learn the clock
            else:
                aging.raced.clear()

    def sweep_partition(
        self, runtime: TableRuntime, replica: Replica, aging: Aging, write: bool
    ) -> tuple[int, int]:
        """One pass over ``replica``'s store: (keys scanned, tombstones written)."""
        spec = runtime.spec
        windowed = aging.retention_ms is not None
        started = time.perf_counter()
        scanned = expired = 0
        start: bytes | None = None
        while not self._stop.is_set():
            try:
                rows = entries(replica, start, self._chunk)
            except StoreClosedError:
                break  # revoked or being reopened: the next interval comes back to it
            if not rows:
                break
            scanned += len(rows)
            if windowed:
                for key, _, _ in rows:
                    if key[-WINDOW_TIME_BYTES:] > aging.newest_end:
                        end = aging.window_end(key)
                        if end is not None:
                            aging.advance(end)
            if write and replica.state is ReplicaState.ACTIVE:
                out: list[Outgoing] = [
                    (spec.topic, replica.partition, key, None, [(EXPIRE_BELOW, b"%d" % (at + 1))])
                    for key, _, at in rows
                    if aging.expired(key, at)
                ]
                if out:
                    self._sink.send_all(out)
                    expired += len(out)
            if len(rows) < self._chunk:
                break
            start = rows[-1][0] + b"\x00"
            self._stop.wait(self._pause_s)
        seconds = time.perf_counter() - started
        self._metrics.expiry_scanned.labels(spec.name).inc(scanned)
        self._metrics.expiry_seconds.labels(spec.name).inc(seconds)
        if expired:
            self._metrics.keys_expired.labels(spec.name).inc(expired)
        log.log(
            logging.INFO if expired else logging.DEBUG,
            "expiry sweep table=%s partition=%d expired=%d scanned=%d seconds=%.3f",
            spec.name,
            replica.partition,
            expired,
            scanned,
            seconds,
        )
        return scanned, expired

    def _rewrite_raced(self, runtime: TableRuntime, replica: Replica, aging: Aging) -> None:
        """Writes again the values whose tombstone raced them (see the docstring)."""
        if not aging.raced:
            return
        keys, aging.raced = aging.raced, []
        if runtime.spec.format == "avro":  # stored as JSON: not the topic's bytes
            log.warning(
                "expiry tombstone raced a write table=%s partition=%d keys=%d: a node restored "
                "after compaction will miss them until they are written again",
                runtime.spec.name,
                replica.partition,
                len(keys),
            )
            return
        out: list[Outgoing] = []
        for key in dict.fromkeys(keys):
            try:
                got = get(replica, key)
            except StoreClosedError:
                return
            if got is not None:
                out.append((runtime.spec.topic, replica.partition, key, got[0], None))
        if out:
            self._sink.send_all(out)
            log.info(
                "expiry tombstone raced a write table=%s partition=%d rewritten=%d",
                runtime.spec.name,
                replica.partition,
                len(out),
            )

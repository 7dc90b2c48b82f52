"""The materializer: one thread that tails every local replica and applies records.

It owns the partition reader (a Kafka consumer is used from one thread only);
other threads change the set of replicas through ``reconcile``, which queues the
wanted roles for the thread to apply between fetches.

A store that refuses a write (a full disk, an I/O error) must not lose records:
the reader has already moved past them. So the replica keeps its applied offset,
stops being read, carries the reason in ``fault`` (the node is not ready while
one of its own partitions has one), and every ``retry_s`` is read again from its
own applied offset, until a write succeeds. The other replicas go on meanwhile.

A table's records, headers included, are untrusted input: whoever may write the
topic writes them. A record that cannot be applied (no key, a key too long or not
UTF-8, a value its codec refuses, a ``kiq.expire-below`` that is not an offset:
``replicas.headers``, anything a check raises on it) goes to the dead letters with the
reason, alone; the rest of the fetch is applied. A replica's position never passes a
record that was neither applied nor dead-lettered: when the dead-letter topic refuses
one, or anything else fails for one partition, that replica faults as above, and the
other partitions and tables of the fetch are applied.

A log that ends below what a replica applied was deleted and made again (or
truncated): the replica's data describes records that are gone, and its offsets
would make it skip the new ones as already applied. Its store is wiped and the
partition restored from the start of the new log.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import cast

from kiq import formats
from kiq.errors import BadRecord, StoreClosedError
from kiq.kafka.dlq import DeadLetters
from kiq.kafka.reader import Fetched, PartitionReader, Record
from kiq.markers import MARKER_KEY, batch_of, format_of
from kiq.metrics import NodeMetrics
from kiq.replicas.aging import Aging, guard
from kiq.replicas.headers import tombstone_guard
from kiq.replicas.reads import entry
from kiq.replicas.replica import Replica
from kiq.replicas.state import ReplicaState, Role
from kiq.replicas.taps import Tap, Taps
from kiq.stores import PartitionStore, StoreTooNew
from kiq.stores.base import Change
from kiq.stores.heap import release_freed_memory
from kiq.tables import MAX_KEY_BYTES, TableRuntime

log = logging.getLogger(__name__)

_MAX_REASON = 200  # characters of an unexpected error in a dead letter's reason
_NO_GUARDS: dict[int, int] = {}  # shared, never written: a fetch with no guarded tombstone
_NONE_EXPIRED: frozenset[int] = frozenset()


class Materializer:
    def __init__(
        self,
        reader: PartitionReader,
        tables: Mapping[str, TableRuntime],
        open_store: Callable[[str, int], PartitionStore],
        dead_letters: DeadLetters,
        metrics: NodeMetrics,
        linger_s: float = 30.0,
        watermark_interval_s: float = 0.5,
        retry_s: float = 5.0,
        release_memory: Callable[[], object] = release_freed_memory,
    ) -> None:
        self._reader = reader
        self._tables = tables
        self._by_topic = {t.spec.topic: t for t in tables.values()}
        self._open_store = open_store
        self._dlq = dead_letters
        self._metrics = metrics
        for name in tables:
            self._count_from_zero(name)
        self._linger_s = linger_s
        self._watermark_interval_s = watermark_interval_s
        self._retry_s = retry_s
        # Called once replicas closed: without it, what their stores freed stayed with
        # malloc, and every partition move left the node a few MB larger (kiq.stores.heap).
        self._release_memory = release_memory
        self._faulted: dict[tuple[str, int], float] = {}  # replica -> when to read it again
        self._replicas: dict[tuple[str, int], Replica] = {}
        self.taps = Taps()  # who watches what a partition applies (kiq.live)
        self._progress_logged: dict[tuple[str, int], float] = {}
        self._wanted: queue.Queue[dict[tuple[str, int], Role]] = queue.Queue()
        self._dropped: queue.Queue[tuple[str, threading.Event]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiq-materializer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for replica in self._replicas.values():
            replica.store.close()
        self._reader.close()
        self._dlq.flush()

    def reconcile(self, wanted: dict[tuple[str, int], Role]) -> None:
        """Ask for exactly these replicas with these roles (applied by the thread soon)."""
        self._wanted.put(wanted)

    def add_table(self, runtime: TableRuntime) -> None:
        """Read ``runtime``'s topic too (the caller added it to the tables this was given)."""
        self._count_from_zero(runtime.spec.name)
        self._by_topic = {**self._by_topic, runtime.spec.topic: runtime}

    def _count_from_zero(self, table: str) -> None:
        """``table``'s counters in /metrics at 0 from the start: Prometheus sees no increase
        in a series that first appears at 1, so an alert would miss the first dead letter."""
        self._metrics.dead_letters.labels(table)
        self._metrics.records_applied.labels(table)

    def drop_table(self, table: str) -> threading.Event:
        """Close every replica of ``table`` (on the thread, soon); the event is set then."""
        done = threading.Event()
        self._dropped.put((table, done))
        return done

    @property
    def replicas(self) -> Mapping[tuple[str, int], Replica]:
        """The local replicas by (table, partition), live and read-only.

        Always the same mapping (never rebound), so a reader may keep it: request
        handlers look replicas up in it with no call in between.
        """
        return self._replicas

    def replica(self, table: str, partition: int) -> Replica | None:
        return self._replicas.get((table, partition))

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        next_watermarks = 0.0
        while not self._stop.is_set():
            try:
                self._drop_tables()
                self._apply_wanted()
                if self._replicas:
                    self._apply(self._reader.consume())
                else:
                    time.sleep(0.05)
                now = time.monotonic()
                if now >= next_watermarks:
                    self._refresh_watermarks()
                    self._expire_lingering(now)
                    self._retry_faulted(now)
                    next_watermarks = now + self._watermark_interval_s
            except Exception:  # keep serving; an operator sees the stack in the log
                log.exception("materializer loop error; retrying")
                time.sleep(0.5)

    def _drop_tables(self) -> None:
        while True:
            try:
                table, done = self._dropped.get_nowait()
            except queue.Empty:
                return
            keys = [key for key in self._replicas if key[0] == table]
            reading = [k for k in keys if self._faulted.pop(k, None) is None]
            self._reader.unassign([(self._replicas[k].topic, k[1]) for k in reading])
            for key in keys:
                replica = self._replicas.pop(key)
                replica.move_to(ReplicaState.REVOKED)
                replica.store.close()
                self._progress_logged.pop(key, None)
            self._by_topic = {t: r for t, r in self._by_topic.items() if r.spec.name != table}
            self._release_memory()
            log.info("table closed table=%s replicas=%d", table, len(keys))
            done.set()

    def _apply_wanted(self) -> None:
        wanted = None
        while True:
            try:
                wanted = self._wanted.get_nowait()
            except queue.Empty:
                break
        if wanted is None:
            return
        to_assign = []
        wanted = {key: role for key, role in wanted.items() if key[0] in self._tables}
        for key, store in self._open_stores([key for key in wanted if key not in self._replicas]):
            table, partition = key
            role = wanted[key]
            opened = Replica(
                table, self._tables[table].spec.topic, partition, store, role, self._aging(table)
            )
            self._replicas[key] = opened
            to_assign.append((opened.topic, partition, opened.position))
            log.info(
                "replica opened table=%s partition=%d role=%s from_offset=%d",
                table,
                partition,
                role.value,
                opened.position,
            )
        for key, role in wanted.items():
            replica = self._replicas.get(key)
            if replica is None:
                continue  # its store did not open; the next reconcile tries again
            if replica.role is not role or replica.lingering_since is not None:
                replica.lingering_since = None
                replica.set_role(role)
                log.info("replica role table=%s partition=%d role=%s", *key, role.value)
        for key, replica in self._replicas.items():
            if key not in wanted and replica.lingering_since is None:
                replica.lingering_since = time.monotonic()
                replica.set_role(Role.STANDBY)
                log.info("replica lingering table=%s partition=%d", *key)
        self._reader.assign(to_assign)

    def _open_stores(
        self, keys: list[tuple[str, int]]
    ) -> list[tuple[tuple[str, int], PartitionStore]]:
        """The stores that opened, several at a time: a restarting node waits for all of
        them, and RocksDB's open overlaps well. One that fails is logged and left out."""

        def open_one(key: tuple[str, int]) -> PartitionStore | None:
            try:
                return self._open_store(*key)
            except StoreTooNew:
                return None  # said once in the log; left closed, as it is
            except Exception:
                log.exception("store open failed table=%s partition=%d; will retry", *key)
                return None

        if len(keys) <= 1:
            stores = [open_one(key) for key in keys]
        else:
            workers = min(4, len(keys))
            with ThreadPoolExecutor(workers, thread_name_prefix="kiq-open") as pool:
                stores = list(pool.map(open_one, keys))
        return [(key, store) for key, store in zip(keys, stores, strict=True) if store is not None]

    def _expire_lingering(self, now: float) -> None:
        expired = [
            key
            for key, r in self._replicas.items()
            if r.lingering_since is not None and now - r.lingering_since > self._linger_s
        ]
        if not expired:
            return
        # A faulted replica is not being read: nothing to unassign.
        reading = [k for k in expired if self._faulted.pop(k, None) is None]
        self._reader.unassign([(self._replicas[k].topic, k[1]) for k in reading])
        for key in expired:
            replica = self._replicas.pop(key)
            replica.move_to(ReplicaState.REVOKED)
            replica.store.close()
            log.info("replica revoked table=%s partition=%d", *key)
        self._release_memory()

    def _apply(self, fetched: Fetched) -> None:
        for (topic, partition), messages in fetched.records.items():
            runtime, replica = self._replica_of(topic, partition)
            if runtime is None or replica is None:
                continue
            try:
                self._apply_records(runtime, replica, messages)
            except Exception as exc:  # one partition's failure must not drop the others' records
                if replica.fault is None:
                    log.exception(
                        "replica apply failed table=%s partition=%d applied=%d; "
                        "reading it again from there in %.0fs",
                        replica.table,
                        partition,
                        replica.applied_offset,
                        self._retry_s,
                    )
                self._fault(replica, f"a fetch could not be applied: {exc!r}"[:_MAX_REASON])
        faulted = self._faulted
        for (topic, partition), end in fetched.ends.items():
            _, replica = self._replica_of(topic, partition)
            if replica is None or (faulted and (replica.table, partition) in faulted):
                continue  # a faulted replica moves only when read again from what it holds
            # An end below the position is no sign of a shorter log here: one fetch can
            # hold an end-of-partition event older than records it also brought.
            if end > replica.position:  # skipped offsets (compaction, control records)
                if not self._store(replica, [], end - 1):
                    continue
                replica.position = end
                if end > replica.waits.lowest:
                    replica.waits.reached(end - 1)
                tap = self.taps.get(replica.table, partition)
                if tap is not None:
                    _tell(tap, end - 1, [], frozenset())
            replica.end_offset = max(end, replica.position)
            self._caught_up(replica)

    def _apply_records(
        self, runtime: TableRuntime, replica: Replica, messages: list[Record]
    ) -> None:
        """Stores one partition's records of a fetch, and moves its replica past them;
        a batch marker among them (``kiq.markers``) is applied where it stands."""
        last = messages[-1].offset()
        if last < replica.position:  # already applied (a re-assign can re-deliver)
            return
        keys = [m.key() for m in messages]
        if MARKER_KEY not in keys:
            self._apply_run(runtime, replica, messages, keys, last)
            return
        start = 0
        for i, key in enumerate(keys):
            if key != MARKER_KEY:
                continue
            marker = messages[i]
            if not self._apply_run(
                runtime, replica, messages[start:i], keys[start:i], marker.offset()
            ):
                return
            self._marked(runtime, replica, marker)
            start = i + 1
        if start < len(messages):
            self._apply_run(runtime, replica, messages[start:], keys[start:], last)

    def _apply_run(
        self,
        runtime: TableRuntime,
        replica: Replica,
        messages: list[Record],
        keys: list[bytes | None],
        last: int,
    ) -> bool:
        """Stores ``messages`` (none: only the position moves) and moves the replica past
        ``last``; False when it cannot go on (the store refused them)."""
        if last < replica.position:
            return True
        if replica.restore_began_at_ms is None and replica.state is ReplicaState.RESTORING:
            replica.restore_began_at_ms = int(time.time() * 1000)
        batch, guards = self._decode(runtime, messages, keys, replica) if messages else ([], {})
        if guards:
            batch = self._guarded(replica, batch, guards)
        if not self._store(replica, batch, last):
            return False
        if replica.aging is not None:
            replica.aging.saw(batch)
        replica.position = last + 1
        if last >= replica.waits.lowest:  # a parked lookup waits for what just landed
            replica.waits.reached(last)
        replica.restored += len(batch)
        replica.end_offset = max(replica.end_offset, replica.position)
        self._metrics.records_applied.labels(runtime.spec.name).inc(len(batch))
        tap = self.taps.get(replica.table, replica.partition)
        if tap is not None:
            _tell(tap, last, batch, frozenset(guards) if guards else _NONE_EXPIRED)
        return True

    def _marked(self, runtime: TableRuntime, replica: Replica, marker: Record) -> None:
        """Batch ``marker``'s id is now applied: held to read as of it, once the replica
        serves (``replicas.snapshots``). A marker whose value is no batch id is a bad record;
        one of a newer format than this kiq reads is skipped (``kiq.formats``)."""
        try:
            written = format_of(marker.headers())
        except Exception:  # confluent-kafka decodes names: a non-UTF-8 one raises
            written = None
        where = f"{runtime.spec.topic}[{replica.partition}]@{marker.offset()}"
        if written is not None and formats.too_new("batch marker", where, written, formats.MARKER):
            return
        batch = batch_of(marker.value()) if written is not None else None
        if batch is None:
            self._dead_letter(
                runtime,
                replica.partition,
                marker.offset(),
                marker.key(),
                marker.value(),
                "a batch marker's value is not a batch id",
            )
        elif replica.state.serving:
            replica.batches.mark(batch, marker.offset(), time.monotonic())
        else:
            replica.batches.saw()

    def _restore_from_start(self, replica: Replica, end: int) -> None:
        """The log now ends at ``end``, below what ``replica`` applied: see the docstring.

        Only the broker's own answer counts as that (``_refresh_watermarks``).
        """
        log.warning(
            "table log ends below its replica table=%s partition=%d applied=%d log_end=%d: "
            "the topic was recreated or truncated; restoring from its start",
            replica.table,
            replica.partition,
            replica.applied_offset,
            end,
        )
        self._reader.unassign([(replica.topic, replica.partition)])
        replica.move_to(ReplicaState.REVOKED)
        replica.store.wipe()
        fresh = Replica(
            replica.table,
            replica.topic,
            replica.partition,
            replica.store,
            replica.role,
            self._aging(replica.table),
        )
        fresh.lingering_since = replica.lingering_since
        self._replicas[(replica.table, replica.partition)] = fresh
        self._reader.assign([(fresh.topic, fresh.partition, fresh.position)])

    def _store(self, replica: Replica, batch: list[Change], last: int) -> bool:
        """Applies ``batch`` up to ``last``; False when the store refused it (see the docstring)."""
        try:
            if replica.batches.intervals:  # what a read as of a held batch still needs
                replica.batches.before_write(partial(entry, replica), batch)
            replica.store.apply(batch, last)
        except StoreClosedError:
            return False  # revoked meanwhile: nothing more to do for it
        except Exception as exc:
            if replica.fault is None:
                log.error(
                    "replica store write failed table=%s partition=%d applied=%d error=%s; "
                    "reading it again in %.0fs",
                    replica.table,
                    replica.partition,
                    replica.applied_offset,
                    exc,
                    self._retry_s,
                )
            self._fault(replica, f"its store refused a write: {exc}")
            return False
        if replica.fault is not None:
            log.warning(
                "replica store writes again table=%s partition=%d applied=%d",
                replica.table,
                replica.partition,
                last,
            )
            replica.fault = None
        return True

    def _fault(self, replica: Replica, reason: str) -> None:
        """Stops reading ``replica`` past what it holds; it is read again from its applied
        offset in ``retry_s`` (``_retry_faulted``). The node is not ready meanwhile."""
        replica.fault = reason
        self._reader.unassign([(replica.topic, replica.partition)])
        self._faulted[(replica.table, replica.partition)] = time.monotonic() + self._retry_s

    def _retry_faulted(self, now: float) -> None:
        """Reopens each faulted replica's store and reads it again from its applied offset.

        Reopened, because RocksDB refuses every write after a failed one until it is
        opened again; the reopened store holds exactly the writes that succeeded.
        """
        for key, due in list(self._faulted.items()):
            if now < due:
                continue
            replica = self._replicas.get(key)
            if replica is None:
                del self._faulted[key]
                continue
            if not replica.store.has_room():  # still full: go on serving what it holds
                self._faulted[key] = now + self._retry_s
                continue
            replica.store.close()  # a reader of it meanwhile moves on to the next replica
            try:
                store = self._open_store(*key)
            except Exception as exc:
                log.warning("replica store reopen failed table=%s partition=%d error=%s", *key, exc)
                self._faulted[key] = now + self._retry_s
                continue
            del self._faulted[key]
            replica.store = store
            replica.position = store.applied_offset() + 1
            if replica.position > replica.waits.lowest:
                replica.waits.reached(replica.position - 1)
            self._reader.assign([(replica.topic, replica.partition, replica.position)])

    def _aging(self, table: str) -> Aging | None:
        """What a new replica of ``table`` hides once aged; None for a table that keeps all."""
        spec = self._tables[table].spec
        if spec.ttl_ms is None and spec.retention_ms is None:
            return None
        return Aging(spec.retention_ms if spec.windowed else None, spec.key_separator or "|")

    def _guarded(
        self, replica: Replica, batch: list[Change], guards: dict[int, int]
    ) -> list[Change]:
        """``batch`` without the sweep's tombstones that met a newer value (``replicas.aging``).

        ``guards``: each guarded tombstone's offset and its ``kiq.expire-below`` (``_decode``).
        """

        def current(key: bytes) -> int | None:
            try:
                got = entry(replica, key)
            except StoreClosedError:
                return None  # the write fails as well, and the batch is read again
            return None if got is None else got[1]

        kept, raced = guard(batch, guards, current)
        if raced and replica.aging is not None and replica.role is Role.ACTIVE:
            replica.aging.raced.extend(raced)
        return kept

    def _replica_of(self, topic: str, partition: int) -> tuple[TableRuntime | None, Replica | None]:
        runtime = self._by_topic.get(topic)
        if runtime is None:
            return None, None
        return runtime, self._replicas.get((runtime.spec.name, partition))

    def _decode(
        self,
        runtime: TableRuntime,
        messages: list[Record],
        keys: list[bytes | None],
        replica: Replica,
    ) -> tuple[list[Change], dict[int, int]]:
        """The changes to store, and the guards of the sweep's tombstones among them.

        Every record is untrusted input (``replicas.headers``): one that cannot be
        applied goes to the dead letters with the reason, alone, and the rest are
        applied. Restores run through here once per record, so the common case (every
        record good) checks the whole fetch at once; only a fetch with a bad record
        pays for checking records one by one to find it. Only a fetch with a tombstone
        has its tombstones' headers read.
        """
        from_offset = replica.position
        if messages[0].offset() < from_offset:
            messages = [m for m in messages if m.offset() >= from_offset]
            if not messages:
                return [], _NO_GUARDS
            keys = [m.key() for m in messages]
        values = [m.value() for m in messages]
        offsets = [m.offset() for m in messages]
        if None not in keys:
            present = cast("list[bytes]", keys)
            try:
                if max(map(len, present)) <= MAX_KEY_BYTES:
                    # A NUL ends any multi-byte sequence: the join is UTF-8 iff every key is.
                    b"\0".join(present).decode("utf-8")
                    decoded = runtime.codec.decode_all(values)
                    changes = list(zip(present, decoded, offsets, strict=True))
                    if None in values:
                        return changes, _guards(messages)
                    return changes, _NO_GUARDS
            except Exception:  # BadRecord, or anything a hostile record makes a check raise
                pass  # one by one, to send only the bad ones to the dead letters
        return self._decode_each(runtime, messages, replica.partition)

    def _decode_each(
        self, runtime: TableRuntime, messages: list[Record], partition: int
    ) -> tuple[list[Change], dict[int, int]]:
        decode = runtime.codec.decode
        changes: list[Change] = []
        guards: dict[int, int] = {}
        for msg in messages:
            key, value, offset = msg.key(), msg.value(), msg.offset()
            try:
                if key is None:
                    raise BadRecord("record has no key")
                if len(key) > MAX_KEY_BYTES:
                    raise BadRecord(f"key longer than {MAX_KEY_BYTES} bytes")
                try:
                    key.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadRecord("key is not UTF-8") from None
                if value is None:  # a tombstone deletes the key; a sweep's is guarded
                    below = tombstone_guard(msg)
                    if below is not None:
                        guards[offset] = below
                    changes.append((key, None, offset))
                else:
                    changes.append((key, decode(value), offset))
            except BadRecord as exc:
                self._dead_letter(runtime, partition, offset, key, value, str(exc))
            except Exception as exc:  # whatever else a record makes a check raise
                reason = f"record cannot be applied: {exc!r}"
                self._dead_letter(runtime, partition, offset, key, value, reason[:_MAX_REASON])
        return changes, guards

    def _dead_letter(
        self,
        runtime: TableRuntime,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        """Sends a record that cannot be applied to the dead letters, with ``reason``.

        A record the dead-letter topic refuses as it is (larger than the producer's
        limit) goes without its key and value: the headers still say where it is in
        its topic. If that is refused too, this raises, and the partition is read
        again later from what it holds: its position never passes a record that was
        neither applied nor dead-lettered.
        """
        topic = runtime.spec.topic
        try:
            self._dlq.send(topic, partition, offset, key, value, reason)
        except Exception as exc:
            copy = f"{reason}; the record is not copied here: {exc!r}"
            self._dlq.send(topic, partition, offset, None, None, copy[: 2 * _MAX_REASON])
        self._metrics.dead_letters.labels(runtime.spec.name).inc()

    def _refresh_watermarks(self) -> None:
        for replica in list(self._replicas.values()):
            try:
                end = self._reader.end_offset(replica.topic, replica.partition)
                if 0 <= end < replica.position:  # a cached figure is not enough to wipe a store
                    end = self._reader.end_offset(replica.topic, replica.partition, fresh=True)
            except Exception as exc:  # the broker may be briefly unreachable
                log.debug(
                    "watermark failed table=%s partition=%d error=%s",
                    replica.table,
                    replica.partition,
                    exc,
                )
                continue
            if 0 <= end < replica.position and (replica.table, replica.partition) not in (
                self._faulted
            ):
                self._restore_from_start(replica, end)
                continue
            replica.end_offset = max(end, replica.position) if end >= 0 else replica.end_offset
            if replica.state is ReplicaState.RESTORING:
                if replica.lag == 0:
                    self._caught_up(replica)
                else:
                    self._log_progress(replica)

    def _log_progress(self, replica: Replica) -> None:
        now = time.monotonic()
        if now - self._progress_logged.get((replica.table, replica.partition), 0.0) < 5.0:
            return
        self._progress_logged[(replica.table, replica.partition)] = now
        rate = replica.restored / max(now - replica.opened_at, 1e-3)
        log.info(
            "replica restoring table=%s partition=%d applied=%d end=%d lag=%d records_per_s=%.0f",
            replica.table,
            replica.partition,
            replica.applied_offset,
            replica.end_offset,
            replica.lag,
            rate,
        )

    def _caught_up(self, replica: Replica) -> None:
        if replica.state is ReplicaState.RESTORING:
            replica.mark_caught_up()
            took = (replica.caught_up_at or 0) - replica.opened_at
            log.info(
                "replica ready table=%s partition=%d state=%s restored=%d seconds=%.2f",
                replica.table,
                replica.partition,
                replica.state.value,
                replica.restored,
                took,
            )


def _tell(tap: Tap, through: int, batch: list[Change], expired: frozenset[int]) -> None:
    """A watcher hears of a batch; whatever it raises must not stop the batches after it
    (their records are read already: an exception here would skip them)."""
    try:
        tap(through, batch, expired)
    except Exception:
        log.exception("watch tap failed through=%d; the watchers of it may miss a change", through)


def _guards(messages: list[Record]) -> dict[int, int]:
    """The ``kiq.expire-below`` of each tombstone in ``messages`` that has one, by offset.

    Raises ``BadRecord`` when one is not valid: ``_decode`` then judges each record alone.
    """
    guards: dict[int, int] = {}
    for msg in messages:
        if msg.value() is None:
            below = tombstone_guard(msg)
            if below is not None:
                guards[msg.offset()] = below
    return guards

"""A property-based fuzz of the materializer with random and adversarial table records.

Each example is a log per (table, partition): records at rising offsets (with gaps, as
compaction leaves), their keys, values and headers drawn from valid and hostile ones
(5,000-digit, negative, non-ASCII and mistyped ``kiq.expire-below``, several of them,
headers that cannot be read, keys that are absent, not UTF-8 or too long, values that
do not decode, codecs that fail unexpectedly, tombstones). A stand-in consumer hands
them to ``Materializer._apply`` (what the consumer loop calls) in fetches of random
sizes, across partitions and tables, going back at times as a re-assign does, and the
dead-letter topic refuses some records or all of them at times. Properties:

- no exception escapes ``_apply``;
- a store's applied offset never passes a record that was neither applied nor
  dead-lettered; a valid record is never dead-lettered, an invalid one never stored;
- every valid record is applied: each store ends as a sequential reading of its log's
  valid records would leave it (the sweep's guard included);
- two replicas fed the same log in different fetches end identical.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiq.kafka.reader import Fetched, Record
from kiq.replicas.aging import EXPIRE_BELOW
from kiq.tables import MAX_KEY_BYTES, TableSpec
from kiq.tables.codecs import JsonCodec, RawCodec, ValueCodec
from tests.unit.replicas.records import Msg, Rig, rig

JSON = TableSpec(name="t", topic="topic-t", ttl_ms=60_000)  # ages: its sweep's tombstones
RAW = TableSpec(name="u", topic="topic-u", format="raw")
TABLES = (JSON, RAW)
PARTITIONS = 2
BOOM = b"boom"  # the JSON table's codec fails on it with no BadRecord: a codec bug
_OFFSET = re.compile(rb"[0-9]{1,19}")


class Buggy(ValueCodec):
    def decode(self, raw: bytes) -> bytes:
        if raw == BOOM:
            raise RuntimeError("codec bug")
        return JsonCodec().decode(raw)


def codec(spec: TableSpec) -> ValueCodec:
    return Buggy() if spec is JSON else RawCodec()


# -- records --------------------------------------------------------------------------------

keys = st.one_of(
    st.sampled_from([b"a", b"b", b"c", "é".encode(), b""]),  # few: writes and deletes meet
    st.sampled_from([None, "a", b"\xff\xfe", b"a\xc3", b"k" * MAX_KEY_BYTES]),
    st.just(b"k" * (MAX_KEY_BYTES + 1)),
    st.binary(max_size=6),
)
values = st.one_of(
    st.sampled_from([b"1", b'{"n": 2}', b"[3]", b'"s"', b"null"]),
    st.none(),  # a tombstone
    st.sampled_from([b"", b"not json", b"1 2", b"1,2", b"{", b"\xff", b'"\xc3"', BOOM]),
    st.binary(max_size=8),
)
guard_values = st.one_of(
    st.integers(0, 40).map(lambda n: b"%d" % n),
    st.sampled_from(
        [
            b"9" * 5000,
            b"9223372036854775807",
            b"9223372036854775808",
            b"0" * 20,
            b"-1",
            b"+3",
            b" 3",
            b"",
            "\u0663".encode(),
            None,
            "3",
            3,
        ]
    ),
    st.binary(max_size=6),
)
header_lists = st.one_of(
    st.none(),
    st.just([]),
    st.lists(
        st.one_of(
            st.tuples(st.just(EXPIRE_BELOW), guard_values),
            st.tuples(st.sampled_from(["other", "kiq.other"]), st.binary(max_size=4)),
            st.just(("kiq.expire-below", b"1", b"x")),  # not a pair
            st.just(7),
        ),
        max_size=3,
    ),
)


@dataclass(frozen=True)
class Rec:
    key: object
    value: bytes | None
    headers: object
    unreadable: bool  # headers() raises, as for a header name that is not UTF-8


recs = st.builds(Rec, keys, values, header_lists, st.booleans())


@dataclass
class Log:
    """One partition's log: records by offset, and where it ends (a compacted tail: later)."""

    table: TableSpec
    partition: int
    records: list[tuple[int, Rec]]
    end: int


@st.composite
def logs(draw: st.DrawFn) -> list[Log]:
    out = []
    for spec in TABLES:
        for p in range(PARTITIONS):
            offset = draw(st.integers(0, 3))  # a log may start later (deleted segments)
            records = []
            for rec in draw(st.lists(recs, max_size=10)):
                records.append((offset, rec))
                offset += draw(st.sampled_from([1, 1, 1, 2, 5]))  # gaps: compaction
            out.append(Log(spec, p, records, offset + draw(st.integers(0, 2))))
    return out


# -- what should happen ---------------------------------------------------------------------


def guard_of(rec: Rec) -> int | bool | None:
    """A tombstone's guard; None: plain; False: the record is invalid. Written apart from
    ``replicas.headers`` on purpose: the fuzz checks the materializer against it."""
    if rec.unreadable:
        return False
    if rec.headers is None:
        return None
    found: list[object] = []
    for item in rec.headers:  # type: ignore[attr-defined]
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        if item[0] == EXPIRE_BELOW:
            found.append(item[1])
    if not found:
        return None
    raw = found[0]
    if len(found) > 1 or not isinstance(raw, bytes) or not _OFFSET.fullmatch(raw):
        return False
    return int(raw) if int(raw) < 2**63 else False


def valid(spec: TableSpec, rec: Rec) -> bool:
    key = rec.key
    if not isinstance(key, bytes) or len(key) > MAX_KEY_BYTES:
        return False
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if rec.value is None:
        return guard_of(rec) is not False
    if spec is RAW:
        return True
    try:
        rec.value.decode("utf-8")
        msgspec.json.decode(rec.value)
    except (UnicodeDecodeError, msgspec.DecodeError):
        return False
    return rec.value != BOOM


def expected(log: Log) -> dict[bytes, tuple[bytes, int]]:
    """The store after a sequential reading of ``log``'s valid records."""
    state: dict[bytes, tuple[bytes, int]] = {}
    for offset, rec in log.records:
        if not valid(log.table, rec):
            continue
        key = rec.key
        assert isinstance(key, bytes)
        if rec.value is not None:
            state[key] = (rec.value, offset)
            continue
        below = guard_of(rec)
        now = state.get(key)
        if below is None or (now is not None and now[1] < below):  # plain, or written below
            state.pop(key, None)
    return state


# -- a consumer -----------------------------------------------------------------------------


@dataclass
class Consumer:
    """Reads each log from where the materializer assigned it, as librdkafka does."""

    rig: Rig
    logs: list[Log]
    cursor: dict[tuple[str, int], int | None] = field(default_factory=dict)
    ended: set[tuple[str, int]] = field(default_factory=set)  # its end event was handed on
    seen: tuple[int, int] = (0, 0)

    def follow(self) -> None:
        """Takes in what the materializer assigned and unassigned since last time."""
        assigned, unassigned = self.rig.reader.assigned, self.rig.reader.unassigned
        a, u = self.seen
        for topic, p in unassigned[u:]:
            self.cursor[(topic, p)] = None
            self.ended.discard((topic, p))
        for topic, p, offset in assigned[a:]:
            self.ended.discard((topic, p))
            records = self.log(topic, p).records
            self.cursor[(topic, p)] = next(
                (i for i, (at, _) in enumerate(records) if at >= offset), len(records)
            )
        self.seen = (len(assigned), len(unassigned))

    def log(self, topic: str, partition: int) -> Log:
        return next(lg for lg in self.logs if lg.table.topic == topic and lg.partition == partition)

    def fetch(self, sizes: dict[tuple[str, int], int], back: dict[tuple[str, int], int]) -> Fetched:
        records: dict[tuple[str, int], list[Record]] = {}
        ends: dict[tuple[str, int], int] = {}
        for tp, size in sizes.items():
            at = self.cursor.get(tp)
            if at is None:
                continue
            at = max(0, at - back.get(tp, 0))  # a re-assign reads again what it had read
            log = self.log(*tp)
            batch = log.records[at : at + size]
            if batch:
                records[tp] = [
                    Msg(r.key, r.value, offset, r.headers, tp[1], r.unreadable)
                    for offset, r in batch
                ]
            self.cursor[tp] = at + len(batch)
            if at + len(batch) == len(log.records):
                ends[tp] = log.end
                self.ended.add(tp)
        return Fetched(records, ends)

    def drained(self) -> bool:
        return all((lg.table.topic, lg.partition) in self.ended for lg in self.logs)


steps = st.lists(
    st.tuples(
        st.dictionaries(
            st.sampled_from([(s.topic, p) for s in TABLES for p in range(PARTITIONS)]),
            st.integers(1, 6),
            min_size=1,
        ),
        st.dictionaries(
            st.sampled_from([(s.topic, p) for s in TABLES for p in range(PARTITIONS)]),
            st.integers(1, 4),
            max_size=1,
        ),
        st.sampled_from(["take", "take", "take", "too-large", "refuse-all"]),
        st.booleans(),  # the retry of faulted replicas comes round
    ),
    max_size=12,
)


def run(logs_: list[Log], schedule: list) -> Rig:  # type: ignore[type-arg]
    """Feeds ``logs_`` to a fresh materializer by ``schedule``, then to the end."""
    r = rig(list(TABLES), PARTITIONS, codec)
    consumer = Consumer(r, logs_)
    consumer.follow()
    every = [(lg.table.topic, lg.partition) for lg in logs_]
    drain = [({tp: 3 for tp in every}, {}, "take", True)] * 200
    for sizes, back, letters, retry in [*schedule, *drain]:
        if consumer.drained() and not r.materializer._faulted and letters == "take":
            break
        r.letters.refuse = letters == "too-large"
        r.letters.refuse_all = letters == "refuse-all"
        if retry:
            r.materializer._retry_faulted(now=float("inf"))
            consumer.follow()
        r.materializer._apply(consumer.fetch(sizes, back))  # nothing may escape
        consumer.follow()
        check_never_passed(r, logs_)
    assert consumer.drained() and not r.materializer._faulted, "the fuzz did not finish"
    return r


def check_never_passed(r: Rig, logs_: list[Log]) -> None:
    """Each store's applied offset passes only records it applied or that were dead-lettered;
    a valid record is never dead-lettered, an invalid one never stored."""
    lettered = {(topic, p, offset) for topic, p, offset, _ in r.letters.sent}
    for log in logs_:
        store = r.store(log.table.name, log.partition)
        for offset, rec in log.records:
            dead = (log.table.topic, log.partition, offset) in lettered
            if valid(log.table, rec):
                assert not dead, (offset, rec)
                if offset <= store.applied_offset():
                    # stored, or a guarded tombstone whose key was written after its guard
                    guarded = rec.value is None and guard_of(rec) is not None
                    assert offset in store.written or guarded, (offset, rec)
            else:
                assert offset not in store.written, (offset, rec)
                if offset <= store.applied_offset():
                    assert dead, (offset, rec)


def contents(r: Rig, log: Log) -> tuple[list[tuple[bytes, bytes, int]], int]:
    store = r.store(log.table.name, log.partition)
    return store.scan(limit=10_000), store.applied_offset()


@settings(
    max_examples=int(os.environ.get("KIQ_MATERIALIZER_FUZZ_EXAMPLES", "150")),
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(logs(), steps, steps)
def test_the_materializer_applies_every_valid_record_and_skips_each_bad_one_alone(
    logs_: list[Log],
    one: list,
    other: list,  # type: ignore[type-arg]
) -> None:
    first, second = run(logs_, one), run(logs_, other)
    for log in logs_:
        want = sorted((k, v, at) for k, (v, at) in expected(log).items())
        got, applied = contents(first, log)
        assert got == want, log
        assert applied == log.end - 1
        assert contents(second, log) == (got, applied)  # same log, other fetches: identical

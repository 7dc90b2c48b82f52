"""Each versioned format (``kiq.formats``): this code writes its version, reads one without
a version as 0.1.0's, and refuses one newer than it reads, saying so once in the log,
without crashing or reading it as something else."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import msgspec
import pytest

from kiq import formats
from kiq.catalog import CATALOG_TOPIC
from kiq.kafka.reader import Fetched, Record
from kiq.markers import FORMAT_HEADER, HEADERS, MARKER_KEY, format_of, marker_value
from kiq.progress import QueryProgress, decode_progress
from kiq.replicas.state import ReplicaState
from kiq.stores import MemoryBudget, StoreTooNew, open_partition_store
from kiq.stores.rocksdb import LAYOUT_FILE
from kiq.tables import checks
from kiq.tables.declared import Declared, Started
from kiq.tables.versions import Alias
from tests.unit.replicas.test_markers import materializer
from tests.unit.replicas.test_materializer import StandInRecord

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "0.1.0"


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused:")]


def _with_version(record: bytes, version: int) -> bytes:
    fields = msgspec.json.decode(record)
    return msgspec.json.encode({**fields, "format_version": version})


def test_records_are_written_with_their_format_version():
    declared = msgspec.json.decode((GOLDEN / "catalog-table.json").read_bytes(), type=Declared)
    assert msgspec.json.decode(declared.encode())["format_version"] == formats.CATALOG
    alias = Alias(table="quotes", version="v2")
    assert msgspec.json.decode(alias.encode())["format_version"] == formats.CATALOG
    started = Started(pipeline="stocks")
    assert msgspec.json.decode(msgspec.json.encode(started))["format_version"] == formats.CATALOG
    progress = QueryProgress(app="a", pipeline="p", query="q")
    assert msgspec.json.decode(progress.encode())["format_version"] == formats.PROGRESS


def test_a_catalog_record_of_a_newer_format_is_skipped_and_said_once(
    caplog: pytest.LogCaptureFixture,
):
    key = "table:stocks/quotes@v2"
    record = (GOLDEN / "catalog-table.json").read_bytes()
    assert checks.decode(CATALOG_TOPIC, key, record, Declared) is not None  # 0.1.0's: version 1
    current = _with_version(record, formats.CATALOG)
    assert checks.decode(CATALOG_TOPIC, key, current, Declared) is not None
    # A newer kiq's record, reshaped besides: refused for its version, not for its shape.
    newer = msgspec.json.encode({"format_version": formats.CATALOG + 1, "key": {"parts": 1}})
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert checks.decode(CATALOG_TOPIC, key, newer, Declared) is None
    assert _refusals(caplog) == [
        f"refused: {CATALOG_TOPIC} record {key!r} is format version {formats.CATALOG + 1}, newer "
        f"than this kiq reads ({formats.CATALOG}); upgrade this node to read it"
    ]
    for broken in (0, -1):
        assert checks.decode(CATALOG_TOPIC, key, _with_version(record, broken), Declared) is None


def test_a_progress_record_of_a_newer_format_is_skipped(caplog: pytest.LogCaptureFixture):
    record = (GOLDEN / "progress.json").read_bytes()
    newer = _with_version(record, formats.PROGRESS + 1)
    key = "stocks/stocks/quotes"
    with caplog.at_level(logging.ERROR):
        assert decode_progress({key: newer}) == []
    assert len(_refusals(caplog)) == 1 and key in _refusals(caplog)[0]
    assert [p.query for p in decode_progress({key: record})] == ["quotes"]


class _Headed(StandInRecord):
    def __init__(self, key: bytes, value: bytes, at: int, headers: object) -> None:
        super().__init__(key, value, at)
        self.h = headers

    def headers(self):  # type: ignore[override]
        return self.h


def test_marker_headers():
    assert HEADERS == [(FORMAT_HEADER, b"1")] and formats.MARKER == 1
    assert format_of(None) == format_of([]) == format_of([("other", b"7")]) == 1  # 0.1.0's
    assert format_of(HEADERS) == 1
    assert format_of([(FORMAT_HEADER, b"12")]) == 12
    for bad in (b"", b"x", None, b"1234567"):
        assert format_of([(FORMAT_HEADER, bad)]) is None


def test_a_marker_of_a_newer_format_is_skipped_neither_held_nor_a_dead_letter(
    caplog: pytest.LogCaptureFixture,
):
    m, store, letters = materializer()
    replica = m.replicas[("t", 0)]
    replica.move_to(ReplicaState.ACTIVE)
    newer = [(FORMAT_HEADER, str(formats.MARKER + 1).encode())]
    fetch: list[Record] = [
        _Headed(MARKER_KEY, marker_value(4), 0, None),  # 0.1.0's
        _Headed(MARKER_KEY, marker_value(5), 1, HEADERS),
        _Headed(MARKER_KEY, b"5;and-more", 2, newer),  # a newer value, read as nothing
        StandInRecord(b"a", b"1", 3),
        _Headed(MARKER_KEY, marker_value(6), 4, [(FORMAT_HEADER, b"x")]),
    ]
    with caplog.at_level(logging.ERROR):
        m._apply(Fetched({("topic-t", 0): fetch}))
    assert replica.batches.held() == [4, 5]
    assert [offset for _, _, offset, _ in letters.sent] == [4]  # the malformed header's
    assert store.get(b"a") == (b"1", 3) and replica.applied_offset == 4
    [said] = _refusals(caplog)
    assert "batch marker topic-t[0]@2 is format version 2" in said


def test_a_store_records_its_layout_and_one_of_0_1_0_is_layout_1(tmp_path: Path):
    store = open_partition_store("rocksdb", tmp_path / "new", "t", 0, MemoryBudget())
    store.close()
    layout = tmp_path / "new" / "tables" / "t" / "0" / LAYOUT_FILE
    assert layout.read_text() == f"{formats.STORE_LAYOUT}\n"
    shutil.copytree(GOLDEN / "store", tmp_path / "old")
    old = tmp_path / "old" / "tables" / "quotes" / "3"
    assert not (old / LAYOUT_FILE).exists()
    store = open_partition_store(
        "rocksdb", tmp_path / "old", "quotes", 3, MemoryBudget(), "price", ("price",)
    )
    assert store.applied_offset() == 41
    store.close()
    assert (old / LAYOUT_FILE).read_text() == "1\n"


def test_a_store_of_a_newer_layout_is_not_opened(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    shutil.copytree(GOLDEN / "store", tmp_path / "data")
    path = tmp_path / "data" / "tables" / "quotes" / "3"
    (path / LAYOUT_FILE).write_text(f"{formats.STORE_LAYOUT + 1}\n")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir())
    with caplog.at_level(logging.ERROR), pytest.raises(StoreTooNew, match="layout 2"):
        open_partition_store("rocksdb", tmp_path / "data", "quotes", 3, MemoryBudget())
    assert sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir()) == before  # untouched
    [said] = _refusals(caplog)
    assert f"store {path} is format version 2" in said
    (path / LAYOUT_FILE).write_text("two\n")
    with pytest.raises(Exception, match="not a version"):
        open_partition_store("rocksdb", tmp_path / "data", "quotes", 3, MemoryBudget())


def test_a_node_leaves_a_store_of_a_newer_layout_closed_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    from kiq.metrics import NodeMetrics
    from kiq.replicas.materializer import Materializer
    from kiq.replicas.state import Role
    from kiq.tables import TableRuntime, TableSpec
    from kiq.tables.codecs import JsonCodec
    from tests.unit.replicas.test_materializer import StandInDeadLetters, StandInReader

    data = tmp_path / "data"
    for partition in (0, 1):
        open_partition_store("rocksdb", data, "t", partition, MemoryBudget()).close()
    newer = data / "tables" / "t" / "1" / LAYOUT_FILE
    newer.write_text(f"{formats.STORE_LAYOUT + 1}\n")
    m = Materializer(
        StandInReader(),
        {"t": TableRuntime(TableSpec(name="t", topic="topic-t"), JsonCodec(), 2)},
        lambda table, partition: open_partition_store(
            "rocksdb", data, table, partition, MemoryBudget()
        ),
        StandInDeadLetters(),  # type: ignore[arg-type]
        NodeMetrics(),
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            m.reconcile({("t", 0): Role.ACTIVE, ("t", 1): Role.STANDBY})
            m._apply_wanted()
    try:
        assert set(m.replicas) == {("t", 0)}
        assert len(_refusals(caplog)) == 1
        assert not [r for r in caplog.records if r.exc_info], "no traceback for a newer store"
        assert newer.read_text() == "2\n"
    finally:
        for replica in m.replicas.values():
            replica.store.close()

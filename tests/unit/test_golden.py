"""Every format a release wrote, as its code wrote it (``tests/golden/<version>/``, made by
``tests/golden/generate.py``), read by the current code, field by field by name: a field
renamed, dropped or moved breaks one of these."""

from __future__ import annotations

import shutil
import tomllib
from base64 import b64decode
from pathlib import Path

import msgspec
import pytest

from kiq.markers import batch_of
from kiq.peers import wire
from kiq.progress import decode_progress
from kiq.stores import MemoryBudget, open_partition_store
from kiq.tables.declared import Declared
from kiq.tables.versions import Alias

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
ROOT = GOLDEN.parents[1]
RELEASES = [r["version"] for r in tomllib.loads((ROOT / "releases.toml").read_text())["release"]]


def test_every_release_has_its_fixtures():
    assert RELEASES, "releases.toml names no release"
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(RELEASES)


@pytest.fixture(params=RELEASES)
def golden(request: pytest.FixtureRequest) -> Path:
    return GOLDEN / request.param


def _wire(golden: Path, name: str) -> bytes:
    return (golden / "wire" / f"{name}.msgpack").read_bytes()


def _source(source: wire.Source | None) -> None:
    assert source is not None
    assert (source.partition, source.lag, source.stale) == (3, 5, True)
    assert (source.applied_offset, source.served_by, source.batch) == (41, b"node-b", 7)


def test_lookups_and_their_results(golden: Path):
    [lookup] = wire.decode_lookups(_wire(golden, "lookups"))
    assert (lookup.table, lookup.key, lookup.max_lag) == ("quotes", b"AAPL", 10)
    assert (lookup.min_offset, lookup.wait_ms) == (40, 250)
    [result] = wire.decode_results(_wire(golden, "lookup-results"))
    assert (result.outcome, result.partition, result.lag, result.stale) == (
        wire.Outcome.FOUND,
        3,
        5,
        True,
    )
    assert (result.served_by, result.offset, result.value) == (b"node-b", 40, b'{"p":1}')
    assert (result.reason, result.applied) == ("", 41)


def test_multiget(golden: Path):
    asked = wire.decode_multiget(_wire(golden, "multiget"))
    assert (asked.table, asked.keys, asked.max_lag) == ("quotes", [b"AAPL", b"MSFT"], 10)
    assert (asked.batch, asked.after) == (7, {3: 40})
    answer = wire.decode_multiget_result(_wire(golden, "multiget-result"))
    assert (answer.found, answer.refused) == ([(b"AAPL", b'{"p":1}')], [1])
    _source(answer.sources[0])


def test_scan_and_top(golden: Path):
    scan = wire.decode_scan(_wire(golden, "scan"))
    assert (scan.table, scan.partition, scan.start, scan.end) == ("quotes", 3, b"A", b"N")
    assert (scan.limit, scan.reverse, scan.max_lag) == (50, True, 10)
    assert (scan.batch, scan.min_offset) == (7, 40)
    page = wire.decode_scan_result(_wire(golden, "scan-result"))
    assert (page.items, page.reverse, page.window) == ([(b"AAPL", b'{"p":1}')], True, b"2026")
    _source(page.source)
    top = wire.decode_top(_wire(golden, "top"))
    assert (top.table, top.partition, top.n, top.prefix) == ("quotes", 3, 5, b"AA")
    assert (top.max_lag, top.window, top.batch, top.min_offset) == (10, b"2026", 7, 40)


def _by_index(read: wire.ByIndex) -> None:
    assert (read.table, read.partition, read.field) == ("quotes", 3, "price")
    assert (read.start, read.end, read.limit, read.reverse) == (b"\x01", b"\x09", 20, True)
    assert (read.count, read.max_lag, read.batch, read.min_offset) == (True, 10, 7, 40)
    assert read.cursor == b"\x05"


def _index_result(result: wire.IndexResult | None) -> None:
    assert result is not None
    assert result.items == [(b"\x02", b"AAPL", b'{"p":1}')]
    assert (result.reverse, result.count, result.field) == (True, 9, "price")
    _source(result.source)


def test_index_reads(golden: Path):
    _by_index(wire.decode_by_index(_wire(golden, "by-index")))
    _index_result(wire.decode_index_result(_wire(golden, "index-result")))
    [read] = wire.decode_by_index_many(_wire(golden, "by-index-many")).reads
    _by_index(read)
    first, second = wire.decode_index_results(_wire(golden, "index-results")).answers
    _index_result(first)
    assert second is None


def test_changes(golden: Path):
    asked = wire.decode_changes(_wire(golden, "changes"))
    assert (asked.table, asked.partition, asked.known) == ("quotes", 3, [(b"AAPL", 40)])
    assert (asked.prefixes, asked.through, asked.wait_ms, asked.since) == ([b"AA"], 41, 500, 39)
    answer = wire.decode_changes_result(_wire(golden, "changes-result"))
    assert answer.changed == [(b"AAPL", b'{"p":1}', 41), (b"MSFT", None, 42)]
    assert (answer.counts, answer.overflow) == ([2], [b"Z"])
    _source(answer.source)


def test_channel(golden: Path):
    ask = wire.decode_channel_ask(_wire(golden, "channel-ask"))
    assert (ask.id, ask.body, ask.credential, ask.principal) == (
        9,
        b"\x91\x95",
        "credential",
        "statement",
    )
    answer = wire.decode_channel_answer(_wire(golden, "channel-answer"))
    assert (answer.id, answer.status, answer.body) == (9, 200, b"\x91")


def test_node_status(golden: Path):
    status = wire.decode_node_status(_wire(golden, "node-status"))
    assert (status.node_id, status.view_version) == ("node-b", 4)
    assert (status.current, status.tables) == ({"quotes": "quotes"}, ["quotes"])
    [replica] = status.replicas
    assert (replica.table, replica.partition, replica.role, replica.state) == (
        "quotes",
        3,
        "active",
        "serving",
    )
    assert (replica.applied_offset, replica.end_offset, replica.lag) == (41, 46, 5)
    assert (replica.restored_records, replica.restore_s, replica.lingering) == (42, 0.5, False)
    assert (replica.fault, replica.keys, replica.bytes) == (None, 12, 4096)


def test_catalog_records(golden: Path):
    declared = msgspec.json.decode((golden / "catalog-table.json").read_bytes(), type=Declared)
    declared.check("table:stocks/quotes@v2")
    assert (declared.table, declared.topic, declared.key, declared.sep) == (
        "quotes",
        "stock-quotes",
        ("symbol",),
        "|",
    )
    assert (declared.partitions, declared.app, declared.pipeline, declared.query) == (
        6,
        "stocks",
        "stocks",
        "quotes",
    )
    assert (declared.ttl_ms, declared.rank_by, declared.consistent) == (60_000, "price", True)
    assert [(f.field, f.type) for f in declared.index] == [("price", "number")]
    assert (declared.version, declared.checkpoint) == ("v2", "/checkpoints/stocks@v2")
    assert (declared.dead_letters, declared.key_types) == (("stock-ticks-dlq",), ("string",))
    assert declared.value_fields is not None
    assert [(f.name, f.type, f.nullable) for f in declared.value_fields] == [
        ("price", "double", False)
    ]
    alias = msgspec.json.decode((golden / "catalog-alias.json").read_bytes(), type=Alias)
    alias.check("alias:stocks/quotes")
    assert (alias.table, alias.version, alias.app) == ("quotes", "v2", "stocks")
    assert (alias.switched_at_ms, alias.previous) == (1, "v1")


def test_progress_record(golden: Path):
    key = "stocks/stocks/quotes"
    [progress] = decode_progress({key: (golden / "progress.json").read_bytes()})
    assert (progress.app, progress.pipeline, progress.query, progress.state) == (
        "stocks",
        "stocks",
        "quotes",
        "running",
    )
    assert (progress.trigger, progress.rates_from, progress.batch) == ("microbatch", "spark", 12)
    assert (progress.input_rows, progress.input_rows_per_s) == (300, 150.5)
    assert (progress.processed_rows_per_s, progress.batch_ms, progress.behind) == (149.5, 80, 4)
    assert [(s.source, s.behind) for s in progress.sources] == [
        ("KafkaV2[Subscribe[stock-ticks]]", 4)
    ]
    assert (progress.reported_ms, progress.published_ms) == (1_764_000_000_000, 1_764_000_001_000)
    assert progress.error == ""


def test_marker(golden: Path):
    assert batch_of((golden / "marker-value.bin").read_bytes()) == 42


def test_store(golden: Path, tmp_path: Path):
    shutil.copytree(golden / "store", tmp_path / "data")  # opening it writes to it
    expected = msgspec.json.decode((golden / "store.json").read_bytes())
    store = open_partition_store(
        "rocksdb", tmp_path / "data", "quotes", 3, MemoryBudget(), "price", ("price",)
    )
    try:
        assert store.applied_offset() == expected["applied"]
        values = {b64decode(k): b64decode(v) for k, v in expected["values"].items()}
        for i, (key, value) in enumerate(values.items()):
            assert store.get(key) == (value, 39 + i)
        assert [k for k, _, _ in store.top(3)] == [b"MSFT", b"AAPL", b"NVDA"]
        assert [k for _, k, _, _ in store.index_scan("price")] == [b"NVDA", b"AAPL", b"MSFT"]
    finally:
        store.close()

"""Writes the golden fixtures of a release: its formats' bytes, as that release's code writes
them, under ``tests/golden/<version>/``; ``tests/unit/test_golden.py`` decodes them with the
current code.

    python tests/golden/generate.py           # the newest release in releases.toml

The release's tree is taken from git (``git archive <commit> src``) and run by this
interpreter (the same dependencies) with only that tree on its path; the part that runs
there (``write``) uses only names that release has. Run once per release, when it is cut:
the fixtures of a release never change after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write(out: Path) -> None:
    """Every format, in the running kiq (the release's): run with that tree on the path."""
    import msgspec

    from kiq.markers import marker_value
    from kiq.peers import wire
    from kiq.progress import QueryProgress, SourceProgress
    from kiq.stores import MemoryBudget, open_partition_store
    from kiq.tables.declared import Declared, IndexedField, ValueField
    from kiq.tables.versions import Alias

    w = out / "wire"
    w.mkdir(parents=True)
    source = wire.Source(3, lag=5, stale=True, applied_offset=41, served_by=b"node-b", batch=7)

    def put(name: str, record: object) -> None:
        (w / f"{name}.msgpack").write_bytes(wire.encode(record))

    put("lookups", [wire.Lookup("quotes", b"AAPL", max_lag=10, min_offset=40, wait_ms=250)])
    put(
        "lookup-results",
        [wire.LookupResult(wire.Outcome.FOUND, 3, 5, True, b"node-b", 40, b'{"p":1}', "", 41)],
    )
    put("multiget", wire.Multiget("quotes", [b"AAPL", b"MSFT"], 10, batch=7, after={3: 40}))
    put("multiget-result", wire.MultigetResult([(b"AAPL", b'{"p":1}')], [1], [source]))
    put("scan", wire.Scan("quotes", 3, b"A", b"N", 50, True, 10, batch=7, min_offset=40))
    put("scan-result", wire.ScanResult([(b"AAPL", b'{"p":1}')], source, True, b"2026"))
    put("top", wire.Top("quotes", 3, 5, b"AA", 10, b"2026", batch=7, min_offset=40))
    by_index = wire.ByIndex(
        "quotes", 3, "price", b"\x01", b"\x09", 20, True, True, 10, 7, 40, b"\x05"
    )
    put("by-index", by_index)
    index_result = wire.IndexResult([(b"\x02", b"AAPL", b'{"p":1}')], source, True, 9, "price")
    put("index-result", index_result)
    put("by-index-many", wire.ByIndexMany([by_index]))
    put("index-results", wire.IndexResults([index_result, None]))
    put(
        "changes",
        wire.Changes("quotes", 3, [(b"AAPL", 40)], [b"AA"], through=41, wait_ms=500, since=39),
    )
    put(
        "changes-result",
        wire.ChangesResult([(b"AAPL", b'{"p":1}', 41), (b"MSFT", None, 42)], source, [2], [b"Z"]),
    )
    put("channel-ask", wire.ChannelAsk(9, b"\x91\x95", "credential", "statement"))
    put("channel-answer", wire.ChannelAnswer(9, 200, b"\x91"))
    status = wire.ReplicaStatus(
        "quotes", 3, "active", "serving", 41, 46, 5, 42, 0.5, False, None, 12, 4096
    )
    put("node-status", wire.NodeStatus("node-b", 4, [status], {"quotes": "quotes"}, ["quotes"]))

    declared = Declared(
        table="quotes",
        topic="stock-quotes",
        key=("symbol",),
        sep="|",
        partitions=6,
        app="stocks",
        pipeline="stocks",
        query="quotes",
        ttl_ms=60_000,
        rank_by="price",
        index=(IndexedField(field="price", type="number"),),
        consistent=True,
        version="v2",
        checkpoint="/checkpoints/stocks@v2",
        dead_letters=("stock-ticks-dlq",),
        key_types=("string",),
        value_fields=(ValueField(name="price", type="double", nullable=False),),
    )
    (out / "catalog-table.json").write_bytes(declared.encode())
    alias = Alias(table="quotes", version="v2", app="stocks", switched_at_ms=1, previous="v1")
    (out / "catalog-alias.json").write_bytes(alias.encode())
    progress = QueryProgress(
        app="stocks",
        pipeline="stocks",
        query="quotes",
        state="running",
        batch=12,
        input_rows=300,
        input_rows_per_s=150.5,
        processed_rows_per_s=149.5,
        batch_ms=80,
        behind=4,
        sources=(SourceProgress(source="KafkaV2[Subscribe[stock-ticks]]", behind=4),),
        reported_ms=1_764_000_000_000,
        published_ms=1_764_000_001_000,
    )
    (out / "progress.json").write_bytes(progress.encode())
    (out / "marker-value.bin").write_bytes(marker_value(42))

    # A RocksDB store of a ranked, indexed table: three keys applied up to offset 41.
    data = out / "store"
    store = open_partition_store("rocksdb", data, "quotes", 3, MemoryBudget(), "price", ("price",))
    values = {b"AAPL": b'{"price":190}', b"MSFT": b'{"price":410}', b"NVDA": b'{"price":130}'}
    store.apply([(k, v, 39 + i) for i, (k, v) in enumerate(values.items())], 41)
    store.close()
    for log in (data / "tables" / "quotes" / "3").glob("LOG*"):
        log.unlink()  # RocksDB's own diary: machine paths and times, never read back
    (out / "store.json").write_bytes(msgspec.json.encode({"values": values, "applied": 41}))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(Path(sys.argv[2]))
        return
    release = tomllib.loads((ROOT / "releases.toml").read_text())["release"][0]
    out = Path(__file__).parent / release["version"]
    if out.exists():
        sys.exit(f"{out} exists: a release's fixtures never change")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", release["commit"], "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        subprocess.run([sys.executable, __file__, "--write", str(out)], check=True, env=env)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

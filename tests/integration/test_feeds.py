"""Tick feeds through the real broker: keys, partitions, values, the CLI."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.feeds import StopReason, TickFile, TickProducer, TickSimulator, pace, validate
from kiq.kafka import topic_partitions
from kiq.partitioning import partition_for
from tests.integration.kafka_io import Record, drain

EXCHANGES = ["NYSE", "NASDAQ", "ARCA", "BATS", "IEX"]
PARTITIONS = 30


def check_records(records: list[Record], partitions: int) -> list[dict]:
    """Every record keyed by its tick's symbol, in that symbol's partition, and valid."""
    ticks = []
    for r in records:
        tick = orjson.loads(r.value)
        assert validate(tick) == tick
        assert r.key == tick["symbol"].encode()
        assert r.partition == partition_for(tick["symbol"], partitions)
        ticks.append(tick)
    return ticks


def in_produce_order(records: list[Record]) -> dict[str, list[dict]]:
    """Per symbol, its ticks in offset order (which is produce order per partition)."""
    by_symbol: dict[str, list[dict]] = collections.defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_symbol[r.key.decode()].append(orjson.loads(r.value))
    return by_symbol


def test_a_paced_simulated_feed_lands_by_symbol(bootstrap, make_topic):
    topic = make_topic("ticks", partitions=PARTITIONS)
    acked = {}

    def on_delivery(symbol, partition, offset, produced_at):
        acked[(partition, offset)] = (symbol, produced_at)

    producer = TickProducer(bootstrap, topic, on_delivery=on_delivery)
    simulator = TickSimulator(100, EXCHANGES, seed=42)
    stats = pace(simulator.ticks(), producer, rate=2000, duration_s=1.0)
    assert producer.flush() == 0
    assert stats.produced == 2000 and stats.stopped is StopReason.DURATION
    assert 1.0 <= stats.elapsed_s < 10.0  # later only on a busy machine
    assert (producer.delivered, producer.failed) == (2000, 0)

    records = drain(bootstrap, topic, expected=2000)
    assert len(records) == 2000
    ticks = check_records(records, PARTITIONS)
    assert {t["exchange"] for t in ticks} == set(EXCHANGES)
    for r in records:
        symbol, produced_at = acked[(r.partition, r.offset)]
        assert symbol == r.key.decode() and produced_at > 0

    # Nothing lost, duplicated or reordered: the same seed gives the same ticks per symbol.
    again = collections.defaultdict(list)
    for tick in TickSimulator(100, EXCHANGES, seed=42).ticks(2000):
        again[tick["symbol"]].append({**tick, "ts": None})
    got = {s: [{**t, "ts": None} for t in ts] for s, ts in in_produce_order(records).items()}
    assert got == again
    for symbol_ticks in in_produce_order(records).values():
        stamps = [t["ts"] for t in symbol_ticks]
        assert stamps == sorted(stamps)


def test_replay_of_csv_and_jsonl_keeps_file_order(bootstrap, make_topic, tmp_path: Path):
    ticks = list(TickSimulator(30, EXCHANGES, seed=7, start_ms=1_795_300_000_000).ticks(300))
    jsonl = tmp_path / "ticks.jsonl"
    jsonl.write_bytes(b"\n".join(orjson.dumps(t) for t in ticks[:150]) + b"\n{broken\n")
    csv = tmp_path / "ticks.csv"
    rows = [",".join("" if t[f] is None else str(t[f]) for f in t) for t in ticks[150:]]
    csv.write_text(",".join(ticks[0]) + "\n" + "\n".join(rows) + "\nAAPL,NYSE,1,2,1,100,100,,\n")

    topic = make_topic("replay", partitions=6)
    producer = TickProducer(bootstrap, topic)
    sources = [TickFile(jsonl), TickFile(csv)]
    for source in sources:
        assert pace(source, producer).stopped is StopReason.EXHAUSTED
    assert producer.flush() == 0
    assert [s.format for s in sources] == ["jsonl", "csv"]
    assert [[b.line for b in s.bad_lines] for s in sources] == [[151], [152]]

    records = drain(bootstrap, topic, expected=300)
    assert len(records) == 300
    check_records(records, 6)
    expected = collections.defaultdict(list)
    for tick in ticks:
        expected[tick["symbol"]].append(tick)
    assert in_produce_order(records) == expected


def test_replay_at_a_rate(bootstrap, make_topic, tmp_path: Path):
    ticks = list(TickSimulator(10, ["IEX"], seed=1, start_ms=1_795_300_000_000).ticks(400))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(t) for t in ticks))
    topic = make_topic("replay-rate", partitions=3)
    producer = TickProducer(bootstrap, topic)
    stats = pace(TickFile(path), producer, rate=1000)
    producer.flush()
    assert stats.produced == 400 and 0.35 <= stats.elapsed_s < 10.0
    assert len(drain(bootstrap, topic, expected=400)) == 400


def run_kiq(*args: str) -> tuple[int, str, str]:
    """``python -m kiq ARGS``: exit code, stdout and stderr with whitespace runs as one space."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("KIQ_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "kiq", *args], capture_output=True, text=True, timeout=120, env=env
    )
    return done.returncode, " ".join(done.stdout.split()), " ".join(done.stderr.split())


def test_cli_feed_stocks_creates_the_topic_and_prints_a_summary(bootstrap):
    topic = f"cli-ticks-{uuid.uuid4().hex[:6]}"
    code, out, err = run_kiq(
        "feed",
        "stocks",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--duration",
        "1",
        "--rate",
        "500",
        "--symbols",
        "20",
        "--exchanges",
        "NYSE,IEX",
        "--partitions",
        "6",
    )
    assert code == 0, err
    assert f"created topic {topic} with 6 partitions" in out
    assert "done: simulated 500 ticks" in out
    assert "delivered 500, failed 0" in out
    assert topic_partitions(bootstrap, topic) == 6
    ticks = check_records(drain(bootstrap, topic, expected=500), 6)
    assert len(ticks) == 500 and {t["exchange"] for t in ticks} == {"NYSE", "IEX"}


def test_cli_feed_replay_reports_bad_lines_and_strict_stops(bootstrap, make_topic, tmp_path):
    ticks = list(TickSimulator(5, ["NYSE"], seed=3, start_ms=1_795_300_000_000).ticks(20))
    lines = [orjson.dumps(t).decode() for t in ticks]
    lines.insert(2, '{"symbol": "AAPL"}')
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    topic = make_topic("cli-replay", partitions=4)

    code, out, err = run_kiq(
        "feed", "replay", str(path), "--bootstrap", bootstrap, "--topic", topic
    )
    assert code == 0, err
    assert "line 3: missing field(s): exchange, ts" in err
    assert "skipped 1 bad line(s)" in err
    assert ": 20 ticks to" in out and "delivered 20, failed 0" in out
    assert len(check_records(drain(bootstrap, topic, expected=20), 4)) == 20

    code, out, err = run_kiq(
        "feed", "replay", str(path), "--bootstrap", bootstrap, "--topic", topic, "--strict"
    )
    assert code == 1
    assert "t.jsonl:3: missing field(s)" in err and "--strict stops" in err


def test_cli_without_create_topic_refuses_a_missing_topic(bootstrap):
    result = CliRunner().invoke(
        app,
        [
            "feed",
            "stocks",
            "--bootstrap",
            bootstrap,
            "--topic",
            "absent-topic",
            "--no-create-topic",
            "--duration",
            "1",
        ],
    )
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "topic 'absent-topic' does not exist" in out and "--no-create-topic" in out
    assert topic_partitions(bootstrap, "absent-topic") is None

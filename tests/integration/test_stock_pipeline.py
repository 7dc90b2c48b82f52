"""The stock pipeline end to end: seeded ticks → real Spark → Kafka → three kiq nodes.

Quotes, day statistics and one-minute bars must equal an independent reference
computed in plain Python over the same ticks, for every symbol, through every
node — before and after the Spark driver is killed with SIGKILL mid-stream, five times, and
restarted. Malformed ticks reach the dead-letter topic and change nothing else.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from kiq.apps.stocks.pipeline import StockTopics
from kiq.bench import stock_reference as ref
from kiq.kafka import create_topics, delete_topics, producer_config
from kiq.runtime import LocalPipeline
from tests.integration.kafka_io import drain
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 6
SYMBOLS = ["AAPL", "MSFT", "NVDA", "AMZN", "GOOGL", "META", "BRK.B", "TSLA", "JPM", "V",
           "XOM", "UNH", "LLY", "AVGO", "COST"]  # fmt: skip
EXCHANGES = ["NYSE", "NASDAQ", "ARCA", "BATS", "IEX"]
MIDNIGHT = 1795305600000  # 2026-11-21T00:00:00Z: the stream crosses a UTC date


def make_ticks(rng: random.Random, n: int, start_ms: int) -> list[dict]:
    mids = {s: 50 + 400 * rng.random() for s in SYMBOLS}
    ticks = []
    for i in range(n):
        s = rng.choice(SYMBOLS)
        mids[s] = max(1.0, mids[s] * (1 + rng.gauss(0, 0.001)))
        spread = rng.choice([0.01, 0.02, 0.03, 0.05])
        bid = round(mids[s] - spread / 2, 2)
        ask = round(bid + spread, 2)
        trade = rng.random() < 0.4
        ts = start_ms + i * 40 + rng.randint(-3000, 3000)  # out of order by up to 6 s
        if rng.random() < 0.01:
            ts -= 86_400_000  # a very late tick from the day before
        ticks.append({
            "symbol": s, "exchange": rng.choice(EXCHANGES), "ts": ts, "bid": bid, "ask": ask,
            "bid_size": rng.choice([100, 200, 300, 500]), "ask_size": rng.choice([100, 200, 400]),
            "last": round(rng.uniform(bid, ask), 2) if trade else None,
            "last_size": rng.choice([1, 10, 100, 250]) if trade else None,
        })  # fmt: skip
    return ticks


MALFORMED = [
    ("AAPL", b"not json at all"),
    ("AAPL", json.dumps({"symbol": "AAPL", "exchange": "NYSE", "ts": MIDNIGHT}).encode()),
    ("MSFT", json.dumps({"symbol": "MSFT", "exchange": "NYSE", "ts": MIDNIGHT, "bid": 10.0,
                         "ask": 9.0, "bid_size": 1, "ask_size": 1, "last": None,
                         "last_size": None}).encode()),
    ("NVDA", json.dumps({"symbol": "NVDA", "exchange": "NYSE", "ts": MIDNIGHT, "bid": -1.0,
                         "ask": 9.0, "bid_size": 1, "ask_size": 1, "last": None,
                         "last_size": None}).encode()),
    ("TSLA", json.dumps({"symbol": "TSLA", "exchange": "MOON", "ts": MIDNIGHT, "bid": 1.0,
                         "ask": 2.0, "bid_size": 1, "ask_size": 1, "last": None,
                         "last_size": None}).encode()),
    ("AAPL", json.dumps({"symbol": "MSFT", "exchange": "NYSE", "ts": MIDNIGHT, "bid": 1.0,
                         "ask": 2.0, "bid_size": 1, "ask_size": 1, "last": None,
                         "last_size": None}).encode()),
]  # fmt: skip


class TickLog:
    """Produces ticks and remembers each valid one with its Kafka offset."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer(producer_config(bootstrap))
        self.topic = topic
        self.valid: list[dict] = []

    def send(self, ticks: list[dict], malformed: list[tuple[str, bytes]] = ()) -> None:
        for tick in ticks:

            def done(err, msg, tick=tick) -> None:
                assert err is None, err
                self.valid.append({**tick, "_offset": msg.offset()})

            self.producer.produce(
                self.topic,
                key=tick["symbol"].encode(),
                value=json.dumps(tick).encode(),
                on_delivery=done,
            )
            self.producer.poll(0)
        for key, value in malformed:
            self.producer.produce(self.topic, key=key.encode(), value=value)
        assert self.producer.flush(30) == 0


def served_state(url: str, symbols: list[str]) -> tuple[dict, dict]:
    """Quotes as a batch and one by one (every node owns some symbols and forwards the rest),
    and bars: a symbol whose single quote differs from its batch quote shows as missing."""
    resp = httpx.get(f"{url}/v1/stocks", params={"symbols": ",".join(symbols)}, timeout=30)
    assert resp.status_code == 200, resp.text
    quotes = resp.json()["quotes"]
    bars = {}
    for s in symbols:
        one = httpx.get(f"{url}/v1/stocks/{s}", timeout=30)
        if one.status_code != 200 or one.json() != quotes.get(s):
            quotes.pop(s, None)
        resp = httpx.get(f"{url}/v1/stocks/{s}/bars", timeout=30)
        if resp.status_code != 200:
            meta = httpx.get(f"{url}/v1/metadata", params={"cluster": "true"}).json()
            print("DEBUG", url, resp.text, json.dumps(meta["tables"]["stock-bars-1m"])[:3000])
        assert resp.status_code == 200, resp.text
        bars[s] = resp.json()["bars"]
    return quotes, bars


# Generous: on a shared 2-core machine a Real-Time Mode driver's 13 long-running tasks took
# minutes to plan and start (the dead letters' first batch: 160 s, 33 s of it planning).
def wait_for_reference(cluster: Cluster, log: TickLog, timeout_s: float = 420) -> None:
    expected_quotes = ref.quotes(log.valid)
    expected_bars = ref.bars(log.valid)
    symbols = sorted(expected_quotes)
    deadline = time.monotonic() + timeout_s
    last_diff = "nothing served yet"
    while time.monotonic() < deadline:
        all_equal = True
        for node in cluster.nodes.values():
            quotes, bars = served_state(node.url, symbols)
            for s in symbols:
                if not ref.same(expected_quotes[s], quotes.get(s)):
                    last_diff = f"{node.node_id} {s}: {expected_quotes[s]} != {quotes.get(s)}"
                    all_equal = False
                    break
                if not ref.same(expected_bars.get(s, []), bars[s]):
                    last_diff = f"{node.node_id} {s} bars differ"
                    all_equal = False
                    break
            if not all_equal:
                break
        if all_equal:
            return
        time.sleep(2)
    raise AssertionError(f"served state never matched the reference: {last_diff}")


# Real-Time Mode commits at the end of each long batch and replays the rest after a kill;
# the tables must come out the same as with micro-batches.
@pytest.mark.parametrize("trigger", ["realtime", "microbatch"])
def test_quotes_days_and_bars_match_the_reference_across_five_driver_kills(
    bootstrap: str, tmp_path: Path, trigger: str
):
    topics = StockTopics()
    # Each trigger's run starts from empty topics (the pipeline's names are fixed).
    delete_topics(bootstrap, _all_topics(topics))
    create_topics(bootstrap, {topics.ticks: PARTITIONS})
    rng = random.Random(2026)
    log = TickLog(bootstrap, topics.ticks)
    log.send(make_ticks(rng, 1500, MIDNIGHT - 60_000), MALFORMED)

    pipeline = LocalPipeline(("stocks",), bootstrap, tmp_path / "checkpoints",
                             tmp_path / "pipeline.log", trigger=trigger,
                             partitions=PARTITIONS)  # fmt: skip
    pipeline.start()
    cluster = Cluster(bootstrap, tmp_path, [
        f"stock-quotes={topics.quotes}",
        f"stock-bars-1m={topics.bars},sep=|",
        f"stock-day-stats={topics.day_stats},sep=|",
    ])  # fmt: skip
    try:
        _wait_topics(bootstrap, topics)
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        wait_for_reference(cluster, log)

        # Kill the driver (Python and JVM) while ticks keep coming, then restart it:
        # five times, each at another moment of its life (starting, mid-batch, idle).
        for i, pause_s in enumerate((4.0, 1.0, 7.0, 2.5, 5.0)):
            more = make_ticks(rng, 600, MIDNIGHT + 30_000 * (i + 1))
            log.send(more[:300])
            time.sleep(pause_s)
            pipeline.kill()
            log.send(more[300:])
            pipeline.start()
        wait_for_reference(cluster, log)
    finally:
        pipeline.stop()
        cluster.shutdown()

    letters = drain(bootstrap, topics.dead_letters, expected=len(MALFORMED), timeout_s=30)
    assert len(letters) == len(MALFORMED), "each malformed tick once, nothing else"
    reasons = sorted(r.headers["kiq.reason"].decode() for r in letters)
    assert reasons == sorted([
        "not JSON, or a field of the wrong type", "missing or malformed field bid", "bid > ask",
        "non-positive price",
        "unknown exchange MOON", "key is not the symbol",
    ])  # fmt: skip


def _all_topics(topics: StockTopics) -> list[str]:
    return [topics.ticks, topics.dead_letters, topics.quotes, topics.day_stats, topics.bars]


def _wait_topics(bootstrap: str, topics: StockTopics) -> None:
    from kiq.kafka import topic_partitions

    deadline = time.monotonic() + 300  # a driver's start on a loaded machine took minutes
    while time.monotonic() < deadline:
        if all(topic_partitions(bootstrap, t) == PARTITIONS
               for t in (topics.quotes, topics.bars, topics.day_stats)):  # fmt: skip
            return
        time.sleep(0.5)
    raise AssertionError("the pipeline did not create its topics")

"""The stock pipeline's test feed and its check against the reference, shared by the
tests that run that pipeline (on a local master, a standalone cluster, three brokers).

Ticks are seeded, out of order and cross a UTC date, into today; ``TickLog`` remembers
every valid tick with its offset, and ``wait_for_reference`` polls every node until quotes,
bars and today's top 5 by volume equal ``stock_reference`` computed over exactly those
ticks.
"""

from __future__ import annotations

import json
import random
import time

import httpx
from confluent_kafka import Producer

from kiq.apps.stocks.pipeline import StockTopics
from kiq.bench import stock_reference as ref
from kiq.kafka import producer_config, topic_partitions
from tests.integration.kafka_io import Record, drain
from tests.integration.test_serving import Cluster

PARTITIONS = 6
SYMBOLS = [
    "AAPL",
    "MSFT",
    "NVDA",
    "AMZN",
    "GOOGL",
    "META",
    "BRK.B",
    "TSLA",
    "JPM",
    "V",
    "XOM",
    "UNH",
    "LLY",
    "AVGO",
    "COST",
]
EXCHANGES = ["NYSE", "NASDAQ", "ARCA", "BATS", "IEX"]
# Today's UTC midnight: the stream crosses into today, whose most traded symbols
# /v1/stocks/top answers (a day's bars stay within the bars' 2-day retention).
MIDNIGHT = int(time.time() // 86_400 * 86_400_000)
TOP_N = 5


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
        ticks.append(
            {
                "symbol": s,
                "exchange": rng.choice(EXCHANGES),
                "ts": ts,
                "bid": bid,
                "ask": ask,
                "bid_size": rng.choice([100, 200, 300, 500]),
                "ask_size": rng.choice([100, 200, 400]),
                "last": round(rng.uniform(bid, ask), 2) if trade else None,
                "last_size": rng.choice([1, 10, 100, 250]) if trade else None,
            }
        )
    return ticks


def _quote(symbol: str, exchange: str, bid: float, ask: float) -> bytes:
    """A tick with a quote and no trade, as JSON: well formed, its values aside."""
    tick = {"symbol": symbol, "exchange": exchange, "ts": MIDNIGHT, "bid": bid, "ask": ask}
    return json.dumps(
        {**tick, "bid_size": 1, "ask_size": 1, "last": None, "last_size": None}
    ).encode()


MALFORMED = [
    ("AAPL", b"not json at all"),
    ("AAPL", json.dumps({"symbol": "AAPL", "exchange": "NYSE", "ts": MIDNIGHT}).encode()),
    ("MSFT", _quote("MSFT", "NYSE", 10.0, 9.0)),  # bid above ask
    ("NVDA", _quote("NVDA", "NYSE", -1.0, 9.0)),  # a negative price
    ("TSLA", _quote("TSLA", "MOON", 1.0, 2.0)),  # no such exchange
    ("AAPL", _quote("MSFT", "NYSE", 1.0, 2.0)),  # the key is not the symbol
]


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


def served_top(url: str) -> tuple[str, list[dict]]:
    """Today's date and its top ``TOP_N`` symbols by volume, as ``url`` answers."""
    resp = httpx.get(f"{url}/v1/stocks/top", params={"by": "volume", "n": TOP_N}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["date"], resp.json()["stocks"]


def served_screen(url: str, exchange: str, min_volume: float) -> list[dict]:
    """Today's symbols quoted on ``exchange`` with at least ``min_volume`` traded, through
    the stock API's screen, three a page."""
    stocks: list[dict] = []
    params = {"exchange": exchange, "min_volume": str(min_volume), "limit": "3"}
    while True:
        resp = httpx.get(f"{url}/v1/stocks", params=params, timeout=30)
        assert resp.status_code == 200, resp.text
        stocks.extend(resp.json()["stocks"])
        if resp.json()["next_cursor"] is None:
            return stocks
        params["cursor"] = resp.json()["next_cursor"]


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
            date, top = served_top(node.url)
            expected_top = ref.top_by_volume(log.valid, date, TOP_N)
            if len(expected_top) < TOP_N or not ref.same(expected_top, top):
                last_diff = f"{node.node_id} top of {date}: {expected_top} != {top}"
                all_equal = False
                break
            # The screen (the day statistics' index on volume), from half the top's last.
            exchange, floor = StockTopics().exchanges[0], expected_top[-1]["volume"] / 2
            expected_screen = ref.screen(log.valid, date, exchange, floor)
            screened = served_screen(node.url, exchange, floor)
            if len(expected_screen) < TOP_N or not ref.same(expected_screen, screened):
                last_diff = f"{node.node_id} screen: {expected_screen} != {screened}"
                all_equal = False
                break
        if all_equal:
            return
        time.sleep(2)
    raise AssertionError(f"served state never matched the reference: {last_diff}")


def served_tables(topics: StockTopics) -> list[str]:
    """The ``--table`` list of nodes serving the stock tables."""
    return [
        f"stock-quotes={topics.quotes}",
        f"stock-bars-1m={topics.bars},sep=|",
        f"stock-day-stats={topics.day_stats},sep=|",
    ]


def wait_topics(bootstrap: str, topics: StockTopics, timeout_s: float = 300) -> None:
    """Until the pipeline has created its table topics and declared its windowed, ranked
    tables in the table catalog (nodes started before would serve them as plain keys)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(
            topic_partitions(bootstrap, t) == PARTITIONS
            for t in (topics.quotes, topics.bars, topics.day_stats)
        ) and _declared(bootstrap, topics):
            return
        time.sleep(0.5)
    raise AssertionError("the pipeline did not create its topics and declare its tables")


def _declared(bootstrap: str, topics: StockTopics) -> bool:
    from kiq.catalog import CATALOG_TOPIC
    from kiq.kafka import compacted
    from kiq.tables.declared import decode_catalog

    found = decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC))
    bars, days = found.get(topics.bars), found.get(topics.day_stats)
    return (
        bars is not None
        and bars.window == "window"
        and days is not None
        and days.rank_by == "volume"
        and days.topic == topics.day_stats
    )


def assert_dead_letters(bootstrap: str, topics: StockTopics, replays: bool = False) -> None:
    """Each malformed tick of ``MALFORMED`` once in the dead letters, with its reason.

    ``replays``: the driver was killed. Dead letters, like any Kafka sink's records, are
    written at least once: a restarted query writes again those since its last commit (up
    to one Real-Time Mode batch), with the same ``kiq.source.*`` headers, which is how a
    reader tells a replay from a second bad record."""
    letters = drain(bootstrap, topics.dead_letters, expected=len(MALFORMED), timeout_s=30)
    if replays:
        letters = drain(bootstrap, topics.dead_letters, expected=10**6, timeout_s=5)
        by_source = {_source(r): r for r in letters}
        kept = {s: (r.key, r.value, r.headers) for s, r in by_source.items()}
        replayed = [r for r in letters if (r.key, r.value, r.headers) != kept[_source(r)]]
        assert not replayed, "a replayed dead letter differs from the first"
        letters = list(by_source.values())
    assert len(letters) == len(MALFORMED), "each malformed tick once, nothing else"
    reasons = sorted(r.headers["kiq.reason"].decode() for r in letters)
    assert reasons == sorted(
        [
            "not JSON, or a field of the wrong type",
            "missing or malformed field bid",
            "bid > ask",
            "non-positive price",
            "unknown exchange MOON",
            "key is not the symbol",
        ]
    )


def _source(letter: Record) -> tuple[bytes, bytes, bytes]:
    h = letter.headers
    return h["kiq.source.topic"], h["kiq.source.partition"], h["kiq.source.offset"]

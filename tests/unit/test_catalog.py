"""The shipped names: the table declarations parse, and agree with the pipelines and the API."""

from __future__ import annotations

from kiq import catalog
from kiq.apps.stocks.api import BARS, DAY_STATS, QUOTES
from kiq.apps.stocks.pipeline import StockTopics
from kiq.apps.wordcount.api import COUNTS, WORDS_TOPIC
from kiq.tables import parse_table


def test_every_shipped_table_is_served_from_its_topic_with_the_pipelines_key_layout():
    specs = {s.name: s for s in map(parse_table, catalog.STOCK_TABLES + catalog.WORD_TABLES)}
    assert {name: spec.topic for name, spec in specs.items()} == {
        catalog.STOCK_QUOTES: "stock-quotes",
        catalog.STOCK_BARS: "stock-bars-1m",
        catalog.STOCK_DAY_STATS: "stock-day-stats",
        catalog.WORD_COUNTS: "word-counts",
    }
    assert specs[catalog.STOCK_QUOTES].key_separator is None
    bar = "AAPL|2026-11-20T14:31:00.000Z|2026-11-20T14:32:00.000Z"
    assert specs[catalog.STOCK_BARS].partition_key(bar) == "AAPL"
    day = "AAPL|2026-11-20T00:00:00.000Z|2026-11-21T00:00:00.000Z"
    assert specs[catalog.STOCK_DAY_STATS].partition_key(day) == "AAPL"
    assert set(catalog.STOCK_TABLE_TOPICS) == {
        specs[name].topic
        for name in (catalog.STOCK_QUOTES, catalog.STOCK_BARS, catalog.STOCK_DAY_STATS)
    }


def test_the_pipeline_writes_what_the_api_reads():
    t = StockTopics()
    assert (t.quotes, t.day_stats, t.bars) == (QUOTES, DAY_STATS, BARS)
    assert t.ticks == "stock-ticks" and t.dead_letters == "stock-ticks-dlq"
    assert (WORDS_TOPIC, COUNTS) == ("words", "word-counts")

"""Word count (seed 001): words → ``word-counts``, value ``{"word", "count"}``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiq import catalog
from kiq.pipelines.kafka_io import StreamOptions, read_topics, write_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

# The query's name, which is its checkpoint directory: renaming it starts it afresh.
QUERY = "word-counts"


def start_wordcount_pipeline(
    spark: SparkSession,
    opts: StreamOptions,
    words: str = catalog.WORDS,
    counts: str = catalog.WORD_COUNTS,
) -> list[StreamingQuery]:
    from pyspark.sql import functions as F

    raw = read_topics(spark, opts, words).where("key IS NOT NULL")
    counted = raw.groupBy(F.col("key").cast("string").alias("word"), "partition").count()
    out = counted.select(
        F.col("word").alias("key"),
        F.to_json(F.struct("word", "count")).alias("value"),
        "partition",
    )
    return [write_topic(out, opts, counts, QUERY, stateful=True)]

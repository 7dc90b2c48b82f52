"""Page views: what a site's visitors look at, by page, by visitor and by country, in windows.

Input: topic ``page-views``, keyed by visitor id, values like
``{"user": "u-042", "page": "/pricing", "country": "DE", "ts": 1764064800123}``
(``ts`` in epoch milliseconds).

Three windowed tables, each keyed ``ENTITY|WINDOW_START`` (the start written fixed-width
in UTC, so an entity's windows sort as bytes in time order and sit in the entity's
partition: a time range of one page, visitor or country is one range scan):

- ``page-minutes``: views and visitors per page per minute;
- ``visitor-hours``: a visitor's views per hour, and the pages seen;
- ``country-days``: views per country per UTC day.

The tables are declared here and only here: ``ctx.write_table`` records each one's topic,
key columns and separator in kiq's table catalog, and the nodes serve what it says.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kiq import Context

VIEW = "user STRING NOT NULL, page STRING NOT NULL, country STRING NOT NULL, ts BIGINT NOT NULL"
MINUTE = "yyyy-MM-dd'T'HH:mm"
HOUR = "yyyy-MM-dd'T'HH"
DAY = "yyyy-MM-dd"


def build(ctx: Context) -> None:
    views = ctx.read(
        "page-views",
        schema=VIEW,
        reject=[
            ("NOT startswith(page, '/')", "page must be a path starting with /"),
            ("length(country) <> 2", "country must be a two-letter code"),
        ],
    ).withColumn("at", F.timestamp_millis("ts"))

    per_minute = views.groupBy("page", F.window("at", "1 minute")).agg(
        F.count("*").alias("views"),
        F.size(F.collect_set("user")).alias("visitors"),
    )
    ctx.write_table("page-minutes", _windowed(per_minute, MINUTE), key=("page", "start"))

    per_hour = views.groupBy("user", F.window("at", "1 hour")).agg(
        F.count("*").alias("views"),
        F.sort_array(F.collect_set("page")).alias("pages"),
    )
    ctx.write_table("visitor-hours", _windowed(per_hour, HOUR), key=("user", "start"))

    per_day = views.groupBy("country", F.window("at", "1 day")).agg(F.count("*").alias("views"))
    ctx.write_table("country-days", _windowed(per_day, DAY), key=("country", "start"))


def _windowed(df: DataFrame, fmt: str) -> DataFrame:
    """Spark's window struct as its start, as text that sorts in time order (UTC)."""
    return df.withColumn("start", F.date_format("window.start", fmt)).drop("window")

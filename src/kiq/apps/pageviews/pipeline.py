"""Page views: what a site's visitors look at, by page, by visitor and by country, in windows.

Input: topic ``page-views``, keyed by visitor id, values like
``{"user": "u-042", "page": "/pricing", "country": "DE", "ts": 1764064800123}``
(``ts`` in epoch milliseconds).

Three windowed tables, each keyed by its entity and written with ``window=``: kiq ends
every key in the window's start and end (ISO 8601 UTC, fixed width), so an entity's
windows sort by time in the entity's partition and a time range of one page, visitor or
country is one range scan (``Tables.windows``, ``GET .../keys/{k}/windows``):

- ``page-minutes``: views and visitors per page per minute, kept for two days;
- ``visitor-hours``: a visitor's views per hour, and the pages seen, kept for 30 days;
- ``country-days``: views per country per UTC day.

The tables are declared here and only here: ``ctx.write_table`` records each one's topic,
key, window and retention in kiq's table catalog, and the nodes serve what it says.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from kiq import Context

VIEW = "user STRING NOT NULL, page STRING NOT NULL, country STRING NOT NULL, ts BIGINT NOT NULL"


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
    ctx.write_table("page-minutes", per_minute, key="page", window="window", retention="2 days")

    per_hour = views.groupBy("user", F.window("at", "1 hour")).agg(
        F.count("*").alias("views"),
        F.sort_array(F.collect_set("page")).alias("pages"),
    )
    ctx.write_table("visitor-hours", per_hour, key="user", window="window", retention="30 days")

    per_day = views.groupBy("country", F.window("at", "1 day")).agg(F.count("*").alias("views"))
    ctx.write_table("country-days", per_day, key="country", window="window")

"""``ctx.write_tables`` with windowed, aging and ranked tables: each of ``window``,
``retention``, ``rank_by`` and ``ttl`` one for all tables or a mapping by table name, run
through ``kiq.testing.run_pipeline`` (kiq's own Context over a local Spark batch)."""

from __future__ import annotations

import pytest

from kiq import Context
from kiq.errors import ConfigError
from kiq.tables.declared import IndexedField
from kiq.testing import run_pipeline

pytestmark = pytest.mark.spark

VIEW = "page STRING NOT NULL, ts BIGINT NOT NULL"
T0 = 1795341600000  # 2026-11-22T10:00:00Z
HOUR, MINUTE = 3_600_000, 60_000
VIEWS = [("p1", T0 + 5), ("p1", T0 + 61_000), ("p2", T0 + 10), ("p1", T0 + HOUR + 1)]
HOURS, MINUTES, TOTALS = "page-hours", "page-minutes", "page-totals"


def _rows(ctx: Context):
    """One aggregation, three kinds of groups: a page's hours, its minutes, its total. The
    hours' window is null on the other kinds' rows, the minutes' likewise."""
    from pyspark.sql import functions as F

    views = ctx.read("views", schema=VIEW)
    kinds = F.array(F.lit(HOURS), F.lit(MINUTES), F.lit(TOTALS))
    rows = views.select("page", "ts", F.explode(kinds).alias("table"))
    size = F.when(F.col("table") == HOURS, HOUR).when(F.col("table") == MINUTES, MINUTE)
    bucket = F.when(size.isNotNull(), F.floor(F.col("ts") / size)).alias("bucket")
    agg = rows.groupBy("table", "page", bucket).agg(F.count("*").alias("views"))

    def window(table: str, ms: int):
        start = F.timestamp_millis(F.col("bucket") * ms)
        end = F.timestamp_millis((F.col("bucket") + 1) * ms)
        return F.when(F.col("table") == table, F.struct(start.alias("start"), end.alias("end")))

    return agg.select(
        "table",
        "page",
        "views",
        window(HOURS, HOUR).alias("hour"),
        window(MINUTES, MINUTE).alias("minute"),
        F.struct("page", "views").alias("counted"),
    )


def pipeline(ctx: Context) -> None:
    ctx.write_tables(
        _rows(ctx),
        table="table",
        key=dict.fromkeys((HOURS, MINUTES, TOTALS), "page"),
        value="counted",
        query="page-tables",
        window={HOURS: "hour", MINUTES: "minute"},
        retention={HOURS: "7 days", MINUTES: "2 days"},
        rank_by="views",
        ttl={TOTALS: "1 hour"},
    )


def _window(page: str, start: int, ms: int) -> str:
    from datetime import UTC, datetime

    def iso(at: int) -> str:
        return datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    return f"{page}|{iso(start)}|{iso(start + ms)}"


def test_mappings_declare_each_table_and_key_its_windows():
    run = run_pipeline(pipeline, {"views": [(p, {"page": p, "ts": ts}) for p, ts in VIEWS]})
    assert run.tables[HOURS] == {
        _window("p1", T0, HOUR): {"page": "p1", "views": 2},
        _window("p2", T0, HOUR): {"page": "p2", "views": 1},
        _window("p1", T0 + HOUR, HOUR): {"page": "p1", "views": 1},
    }
    assert run.tables[MINUTES] == {
        _window("p1", T0, MINUTE): {"page": "p1", "views": 1},
        _window("p1", T0 + MINUTE, MINUTE): {"page": "p1", "views": 1},
        _window("p2", T0, MINUTE): {"page": "p2", "views": 1},
        _window("p1", T0 + HOUR, MINUTE): {"page": "p1", "views": 1},
    }
    assert run.tables[TOTALS] == {
        "p1": {"page": "p1", "views": 3},
        "p2": {"page": "p2", "views": 1},
    }
    assert run.dead_letters == [], "a window null on another table's rows is no dead letter"
    declared = {d.table: d for d in run.declared}
    assert {t: (d.key, d.window, d.retention_ms) for t, d in declared.items()} == {
        HOURS: (("page",), "hour", 7 * 86_400_000),
        MINUTES: (("page",), "minute", 2 * 86_400_000),
        TOTALS: (("page",), None, None),
    }
    assert {t: (d.rank_by, d.ttl_ms) for t, d in declared.items()} == {
        HOURS: ("views", None),
        MINUTES: ("views", None),
        TOTALS: ("views", HOUR),
    }


def _fails(**options: object) -> str:
    def build(ctx: Context) -> None:
        settings: dict[str, object] = {"key": "page", "value": "counted", "query": "q"}
        ctx.write_tables(_rows(ctx), table="table", **{**settings, **options})  # type: ignore[arg-type]

    with pytest.raises(ConfigError) as caught:
        run_pipeline(build, {"views": []})
    return str(caught.value)


def test_what_the_mappings_refuse_before_the_query_starts():
    names = {HOURS: "page", TOTALS: "page"}
    assert "retention applies to windowed tables" in _fails(key=names, retention={TOTALS: "1 day"})
    assert f"window= names {MINUTES}, which key= does not" in _fails(
        key=names, window={MINUTES: "minute"}
    )
    assert "must be a window struct" in _fails(key=names, window={HOURS: "views"})
    assert "not a struct column with a numeric field 'page'" in _fails(
        key=names, rank_by={HOURS: "page"}
    )
    assert "name the tables in a mapping" in _fails(window="hour")
    assert f"index= names {MINUTES}, which key= does not" in _fails(
        key=names, index={MINUTES: ["page"]}
    )
    assert "index='views' is one name, not a list" in _fails(key=names, index="views")
    assert "index field 'hour' is not a top-level field" in _fails(key=names, index=["hour"])


def test_indexes_are_declared_per_table_with_their_kinds():
    def build(ctx: Context) -> None:
        ctx.write_tables(
            _rows(ctx),
            table="table",
            key={HOURS: "page", TOTALS: "page"},
            value="counted",
            query="q",
            window={HOURS: "hour"},
            index={TOTALS: ["views", "page"]},
        )
        views = ctx.read("views", schema=VIEW)
        ctx.write_table("pages", views, key="page", index=("ts",))

    run = run_pipeline(build, {"views": [(p, {"page": p, "ts": ts}) for p, ts in VIEWS]})
    assert {d.table: d.index for d in run.declared} == {
        HOURS: (),
        TOTALS: (
            IndexedField(field="views", type="number"),
            IndexedField(field="page", type="text"),
        ),
        "pages": (IndexedField(field="ts", type="number"),),
    }

"""A pipeline run as another version of its tables (`kiq pipeline run --version v2`).

Version v2 writes every topic under a name of its own (``TOPIC.v2``: tables, dead letters,
streams), reads its inputs as named, checkpoints under ``ROOT/PIPELINE@v2`` and declares
its tables as v2 with that checkpoint; v1 writes what it always wrote. The Context runs
over ``kiq.testing``'s batch (its ``BatchIO``), the runner over stand-ins for Spark and Kafka.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from kiq import settings
from kiq.cli.main import app
from kiq.errors import ConfigError
from kiq.pipelines import io as pipeline_io
from kiq.pipelines import runner, running
from kiq.pipelines.context import Context
from kiq.pipelines.io import KafkaIO
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.targets import Target
from kiq.settings import PipelineSettings, SparkSettings
from kiq.tables.declared import Declared, Started, decode_started
from kiq.tables.versions import run_name

cli = CliRunner()

ORDER = "order_id STRING NOT NULL, customer STRING, amount DOUBLE NOT NULL"
ORDERS = [
    ("alice", {"order_id": "o-1", "customer": "alice", "amount": 10.0}),
    ("bob", {"order_id": "o-2", "customer": "bob", "amount": 3.0}),
    ("carol", "not json"),  # a read's dead letter
    ("x", {"order_id": "o-3", "customer": None, "amount": 1.0}),  # no key: the table's
]


def orders_pipeline(ctx: Context) -> None:
    from pyspark.sql import functions as F

    orders = ctx.read("orders", schema=ORDER)
    totals = orders.groupBy("customer").agg(F.sum("amount").alias("spent"))
    ctx.write_table("totals", totals, key="customer")
    ctx.write_topic("big-orders", orders.where("amount > 5").select("order_id"), key="order_id")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from kiq.testing._session import local_session, stop_session

    yield local_session()
    stop_session()


def _run(spark: Any, version: str) -> tuple[Context, Any]:
    from kiq.testing._pipeline import BatchIO

    io = BatchIO(spark, {"orders": ORDERS}, partitions=2)
    opts = StreamOptions(bootstrap="b:1", checkpoint_root=f"/ck/{run_name('shop', version)}")
    ctx = Context(spark, opts, "shop", 2, io=io, version=version)
    orders_pipeline(ctx)
    return ctx, io


def _by_topic(io: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for record in io.records:
        out.setdefault(record.topic, []).append(record)
    return out


@pytest.mark.spark
def test_version_v2_writes_topics_of_its_own_and_declares_itself(spark: Any) -> None:
    ctx, io = _run(spark, "v2")
    topics = _by_topic(io)
    written = {"totals.v2", "totals-dlq.v2", "orders-dlq.v2", "big-orders.v2"}
    assert set(topics) == written
    assert set(io.created) == written | {"big-orders-dlq.v2"}  # the input existed: not made
    assert {r.key for r in topics["totals.v2"]} == {b"alice", b"bob"}
    assert [r.reason is not None for r in topics["orders-dlq.v2"]] == [True]
    assert "customer" in (topics["totals-dlq.v2"][0].reason or "")
    assert {r.key for r in topics["big-orders.v2"]} == {b"o-1"}
    # the queries keep their names: their checkpoints differ by the run's directory
    assert io.queries == ["totals", "big-orders"]
    (declared,) = io.declared
    assert (declared.table, declared.topic, declared.version) == ("totals", "totals.v2", "v2")
    assert (declared.pipeline, declared.checkpoint) == ("shop", "/ck/shop@v2")
    assert (declared.name, declared.catalog_key) == ("totals@v2", "table:kiq/totals@v2")
    assert ctx.declared == ["totals"]


@pytest.mark.spark
def test_version_v1_writes_what_it_always_wrote_and_records_its_checkpoint(spark: Any) -> None:
    _, io = _run(spark, "v1")
    assert set(_by_topic(io)) == {"totals", "totals-dlq", "orders-dlq", "big-orders"}
    assert set(io.created) == {"totals", "totals-dlq", "orders-dlq", "big-orders", "big-orders-dlq"}
    (declared,) = io.declared
    assert (declared.topic, declared.version, declared.checkpoint) == (
        "totals",
        "v1",
        "/ck/shop",
    )
    assert declared.catalog_key == "table:kiq/totals"


@pytest.mark.spark
def test_write_tables_and_named_dead_letters_take_the_version_too(spark: Any) -> None:
    from pyspark.sql import functions as F

    from kiq.testing._pipeline import BatchIO

    io = BatchIO(spark, {"orders": ORDERS}, partitions=1)
    opts = StreamOptions(bootstrap="b:1", checkpoint_root="/ck/shop@v3")
    ctx = Context(spark, opts, "shop", 1, {"big": "orders-big"}, io=io, version="v3")
    orders = ctx.read("orders", schema=ORDER, dead_letters="bad-orders")
    rows = orders.select(
        F.when(F.col("amount") > 5, "big").otherwise("small").alias("t"), "order_id", "amount"
    )
    ctx.write_tables(
        rows, "t", {"big": "order_id", "small": "order_id"}, query="sizes", dead_letters="oops"
    )
    assert {d.topic for d in io.declared} == {"orders-big.v3", "small.v3"}
    assert {"orders-big.v3", "small.v3", "oops.v3", "bad-orders.v3"} <= set(io.created)
    assert not {"orders-big", "small", "oops", "bad-orders"} & set(io.created)


def test_a_version_name_is_checked_before_anything_runs() -> None:
    opts = StreamOptions(bootstrap="b:1", checkpoint_root="/ck")
    with pytest.raises(ConfigError, match="not a version name"):
        Context(None, opts, "p", version="v 2")  # type: ignore[arg-type]
    stop = threading.Event()
    with pytest.raises(ConfigError, match="not a version name"):
        runner.run_targets([], SparkSettings(), opts, stop_event=stop, version="v2/x")


# -- the runner -------------------------------------------------------------------------------


class _Query:
    def __init__(self, name: str) -> None:
        self.name, self.id, self.isActive = name, f"id-{name}", True

    def stop(self) -> None:
        self.isActive = False

    def exception(self) -> None:
        return None


class _Spark:
    def stop(self) -> None: ...


class _Catalog:
    """``kiq.kafka.compacted`` over a dict: what is put, and what a read finds."""

    def __init__(self, found: Mapping[str, bytes] | None = None) -> None:
        self.found = dict(found or {})
        self.puts: list[dict[str, bytes | None]] = []

    def ensure(self, *_: Any, **__: Any) -> None: ...

    def read_latest(self, *_: Any, **__: Any) -> dict[str, bytes]:
        return dict(self.found)

    def put(self, _bootstrap: str, _topic: str, records: dict[str, Any], **__: Any) -> None:
        self.puts.append(records)


def _run_targets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str
) -> tuple[Context, dict[str, Any]]:
    seen: dict[str, Any] = {"catalog": _Catalog()}
    contexts: list[Context] = []

    class Publisher:
        def __init__(self, _bootstrap: str, owned: list[Any], **_: Any) -> None:
            seen["owned"] = [(pipeline, query.name) for pipeline, _, query in owned]

        def maybe_publish(self) -> None: ...

        def close(self, _states: Any = None) -> None: ...

    def build_session(_settings: Any, app_name: str) -> _Spark:
        seen["app_name"] = app_name
        return _Spark()

    monkeypatch.setattr(runner, "build_session", build_session)
    monkeypatch.setattr(runner, "partitioner_jar", lambda _dir: None)
    monkeypatch.setattr(running, "ProgressPublisher", Publisher)
    monkeypatch.setattr(runner, "compacted", seen["catalog"])

    def build(ctx: Context) -> None:
        contexts.append(ctx)
        ctx.declared.append("bars")
        ctx.queries.append(_Query("bars"))  # type: ignore[arg-type]

    stop = threading.Event()
    stop.set()  # the queries "run" until the loop's first look
    opts = StreamOptions(bootstrap="b:1", checkpoint_root=str(tmp_path), trigger="microbatch")
    target = Target("stocks", "kiq.apps.stocks.pipeline:build", build)
    runner.run_targets([target], SparkSettings(), opts, stop_event=stop, version=version)
    (ctx,) = contexts
    return ctx, seen


def test_a_v2_run_is_a_pipeline_of_its_own_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=runner.__name__):
        ctx, seen = _run_targets(monkeypatch, tmp_path, "v2")
    assert (ctx.pipeline, ctx.version) == ("stocks", "v2")
    assert ctx.opts.checkpoint_root == f"{tmp_path}/stocks@v2"
    assert seen["app_name"] == "kiq-stocks@v2"
    assert seen["owned"] == [("stocks@v2", "bars")]  # progress key APP/stocks@v2/bars
    (records,) = seen["catalog"].puts
    started = decode_started({k: v for k, v in records.items() if v is not None})
    assert list(started) == ["stocks@v2"] and started["stocks@v2"].tables == ("bars",)
    assert "pipeline:kiq/stocks@v2" in records
    assert any("version=v2" in r.getMessage() for r in caplog.records)


def test_a_v1_run_keeps_its_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ctx, seen = _run_targets(monkeypatch, tmp_path, "v1")
    assert ctx.opts.checkpoint_root == f"{tmp_path}/stocks" and ctx.version == "v1"
    assert seen["app_name"] == "kiq-stocks"
    assert seen["owned"] == [("stocks", "bars")]
    (records,) = seen["catalog"].puts
    assert list(records) == [Started(pipeline="stocks").catalog_key]


# -- the catalog ------------------------------------------------------------------------------


def _declared(**changes: Any) -> Declared:
    base = Declared(table="t", topic="t", key=("k",), pipeline="p", checkpoint="/ck/p")
    return msgspec.structs.replace(base, **changes)


def _declare(
    monkeypatch: pytest.MonkeyPatch, found: list[Declared], table: Declared
) -> dict[str, bytes | None]:
    catalog = _Catalog({d.catalog_key: d.encode() for d in found})
    monkeypatch.setattr(pipeline_io, "compacted", catalog)
    KafkaIO(None, StreamOptions(bootstrap="b:1", checkpoint_root="/ck"), None).declare([table])  # type: ignore[arg-type]
    return catalog.puts[0] if catalog.puts else {}


def test_each_version_is_declared_beside_the_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    v1 = _declared()
    v2 = _declared(topic="t.v2", version="v2", checkpoint="/ck/p@v2")
    with caplog.at_level(logging.WARNING, logger=pipeline_io.__name__):
        assert list(_declare(monkeypatch, [v1], v2)) == ["table:kiq/t@v2"]
        assert _declare(monkeypatch, [v1, v2], v2) == {}  # unchanged: nothing written
        assert _declare(monkeypatch, [v1, v2], v1) == {}
        # a record from before checkpoints were recorded gains one, quietly
        assert list(_declare(monkeypatch, [_declared(checkpoint="")], v1)) == ["table:kiq/t"]
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger=pipeline_io.__name__):
        _declare(monkeypatch, [v1, v2], _declared(topic="u.v2", version="v2"))
    assert [r.args[0] for r in caplog.records] == ["t@v2"]  # type: ignore[index]


# -- the command line and the setting ---------------------------------------------------------


def test_the_version_setting_defaults_to_v1_and_comes_from_env_or_toml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KIQ_PIPELINE_VERSION", raising=False)
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert settings.load(PipelineSettings).version == "v1"
    config = tmp_path / "kiq.toml"
    config.write_text('[pipeline]\nversion = "v3"\n')
    assert settings.load(PipelineSettings, config).version == "v3"
    assert settings.load(PipelineSettings, config, version="v4").version == "v4"
    monkeypatch.setenv("KIQ_PIPELINE_VERSION", "v2")
    assert settings.load(PipelineSettings).version == "v2"


@pytest.mark.parametrize("where", ["flag", "env", "toml"])
def test_a_bad_version_stops_the_run_before_spark_starts(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KIQ_PIPELINE_VERSION", raising=False)
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    started: list[Any] = []
    monkeypatch.setattr(runner, "run_targets", lambda *a, **k: started.append(a))
    args = ["pipeline", "run", "stocks"]
    if where == "flag":
        args += ["--version", "v2 beta"]
    elif where == "env":
        monkeypatch.setenv("KIQ_PIPELINE_VERSION", "v2 beta")
    else:
        (tmp_path / "kiq.toml").write_text('[pipeline]\nversion = "v2 beta"\n')
        args = ["--config", str(tmp_path / "kiq.toml"), *args]
    result = cli.invoke(app, args)
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in output, output
    assert "'v2 beta' is not a version name" in output and "--version" in output
    assert not started


def test_a_good_version_reaches_the_runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KIQ_PIPELINE_VERSION", raising=False)
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    given: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "run_targets", lambda *a, **k: given.append(k))
    result = cli.invoke(app, ["pipeline", "run", "stocks", "--version", "v2"])
    assert result.exit_code == 0, result.output
    assert [k["version"] for k in given] == ["v2"]

"""kiq's pipelines in a Spark session someone else built: ``spark-submit``, a notebook,
a managed Spark.

``start(spark, build)`` does on the given session what `kiq pipeline run` does on its own:
the same settings (keyword arguments, then ``KIQ_*`` environment variables, then the
TOML ``config``), tables declared before their queries start, topics created or refused,
the start recorded in the catalog, progress to ``kiq-progress``, checkpoints per query.
It first checks the session: a JVM driver (not Spark Connect), Spark's Kafka connector on
its classpath (which can only be given as the session starts: one message says which
setting), kiq's partitioner (composite keys only), and kiq's SQL settings set where the
session's owner left them unset. ``run`` is ``start`` that blocks until a signal, the
JVM's shutdown, or a failure. The session stays the caller's: kiq never stops it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiq import settings
from kiq.errors import ConfigError, SetupError
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.running import Pipelines
from kiq.pipelines.session import needed_conf, sql_conf
from kiq.pipelines.targets import Target, of_function, resolve
from kiq.runtime.jars import CONNECTOR_PACKAGE, PARTITIONER, PARTITIONER_CLASS
from kiq.runtime.partitioner_build import JAR_NAME
from kiq.tables.versions import check_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# What Spark's Kafka source and sink load, by the jar that holds it: a session without any
# of them fails only when the first query starts, with Spark's own words and a stack.
CONNECTOR_CLASSES = {
    "org.apache.spark.sql.kafka010.KafkaSourceProvider": "spark-sql-kafka-0-10",
    "org.apache.spark.kafka010.KafkaConfigUpdater": "spark-token-provider-kafka-0-10",
    "org.apache.kafka.clients.producer.KafkaProducer": "kafka-clients",
    "org.apache.commons.pool2.impl.GenericObjectPool": "commons-pool2",
}
SPARK_DEFAULT_SHUFFLE = "200"

Build = Callable[[Any], object] | str
Builds = Build | Sequence[Build] | None


@dataclass(frozen=True)
class _Plan:
    """What one start needs, from the arguments, the environment and the config file."""

    targets: list[Target]
    opts: StreamOptions
    spark: settings.SparkSettings
    partitions: int
    topics: dict[str, str]
    app: str
    version: str


def start(
    spark: SparkSession,
    build: Builds = None,
    *,
    app: str | None = None,
    bootstrap: str | None = None,
    checkpoint_dir: str | Path | None = None,
    config: str | Path | None = None,
    trigger: str | None = None,
    partitions: int | None = None,
    interval: str | None = None,
    realtime_batch: str | None = None,
    version: str | None = None,
) -> Pipelines:
    """Start pipelines on ``spark`` and return at once, their queries running.

    ``build`` is a function ``build(ctx)``, a target (``"orders.py:build"``,
    ``"package.module:build"``, ``"stocks"``), or a list of them; None runs the config
    file's ``[app] pipelines``. The keyword arguments override ``KIQ_*`` variables, which
    override ``config`` (the TOML file; default ``$KIQ_CONFIG`` or ``./kiq.toml``).
    ``Pipelines.stop()`` stops them; ``Pipelines.wait()`` blocks until they stop.
    """
    pipelines = _start(spark, build, locals())
    pipelines.watch_in_background()
    return pipelines


def run(
    spark: SparkSession,
    build: Builds = None,
    *,
    app: str | None = None,
    bootstrap: str | None = None,
    checkpoint_dir: str | Path | None = None,
    config: str | Path | None = None,
    trigger: str | None = None,
    partitions: int | None = None,
    interval: str | None = None,
    realtime_batch: str | None = None,
    version: str | None = None,
) -> None:
    """``start``, then block until SIGTERM or SIGINT (in the main thread), the JVM's own
    shutdown (``spark-submit`` told to stop), or a failure, which raises
    ``PipelineFailed``. The queries are stopped gracefully either way."""
    from kiq.pipelines.runner import stop_on_signals

    stop = threading.Event()
    with stop_on_signals(stop):  # from here on: a signal during the start stops too
        _start(spark, build, locals(), stop).watch()


def session_conf(config: str | Path | None = None, *, packages: bool = False) -> dict[str, str]:
    """The Spark settings a session needs for kiq's pipelines, to give as it is built
    (``SparkSession.builder.config(map=...)``); `kiq setup --spark-conf` prints the same.
    With ``packages``, the connector as Maven coordinates instead of the jar cache's jars."""
    found = settings.load(settings.SparkSettings, _path(config))
    return needed_conf(found, packages=packages)


def _start(
    spark: SparkSession, build: Builds, given: dict[str, Any], stop: threading.Event | None = None
) -> Pipelines:
    from kiq.pipelines.runner import start_targets

    plan = _plan(spark, build, given)
    partitioner = check_session(spark, plan.spark)
    return start_targets(
        spark,
        plan.targets,
        plan.opts,
        plan.partitions,
        plan.topics,
        partitioner=partitioner,
        app=plan.app,
        version=plan.version,
        stop_event=stop,
    )


def _path(config: str | Path | None) -> Path | None:
    return None if config is None else Path(config)


def _plan(spark: SparkSession, build: Builds, given: dict[str, Any]) -> _Plan:
    from kiq.kafka.security import KafkaSecurity
    from kiq.tables.declared import parse_serve_tables

    config = _path(given.get("config"))
    conf = settings.load(
        settings.PipelineSettings,
        config,
        **{
            k: given.get(k)
            for k in ("bootstrap", "trigger", "partitions", "interval", "realtime_batch", "version")
        },
    )
    check_version(conf.version, "version (version=, KIQ_PIPELINE_VERSION or [pipeline] version)")
    checkpoint = given.get("checkpoint_dir")
    master = _master(spark)
    spark_settings = settings.load(
        settings.SparkSettings,
        config,
        master=master,
        checkpoint_dir=None if checkpoint is None else str(checkpoint),
    )
    app_settings = settings.load(settings.AppSettings, config, name=given.get("app"))
    served = parse_serve_tables(settings.load(settings.ServeSettings, config).tables)[0]
    security = KafkaSecurity.from_settings(settings.load(settings.KafkaSettings, config))
    opts = StreamOptions(
        bootstrap=conf.bootstrap,
        checkpoint_root=spark_settings.checkpoint_root,
        trigger=conf.trigger,
        interval=conf.interval,
        security=security,
        realtime_batch=conf.realtime_batch,
        input_tasks=spark_settings.input_tasks_per_batch,
    )
    if not spark_settings.checkpoint_uri:
        Path(spark_settings.checkpoint_root).mkdir(parents=True, exist_ok=True)
    return _Plan(
        targets=_targets(build, app_settings.pipelines),
        opts=opts,
        spark=spark_settings,
        partitions=conf.partitions,
        topics={t.name: t.topic for t in served if t.topic is not None},
        app=app_settings.name,
        version=conf.version,
    )


def _targets(build: Builds, from_config: list[str]) -> list[Target]:
    if build is None:
        if not from_config:
            raise ConfigError(
                "name the pipelines: kiq.pipelines.start(spark, build), where build is a "
                'function build(ctx) or "file.py:build", or list them as [app] pipelines '
                "in the config file (config=)"
            )
        builds: Sequence[Build] = from_config
    elif isinstance(build, str) or callable(build):
        builds = [build]
    else:
        builds = list(build)
    targets = [resolve(b) if isinstance(b, str) else of_function(b) for b in builds]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(f"two pipelines have one name (their checkpoint directory): {names}")
    return targets


def _master(spark: SparkSession) -> str:
    context = getattr(spark, "sparkContext", None)
    jvm = getattr(context, "_jvm", None) if context is not None else None
    if context is None or jvm is None:
        raise ConfigError(
            "kiq runs pipelines in a classic Spark session, whose driver has a JVM: this one "
            "has none (Spark Connect?). Build the session with SparkSession.builder in the "
            "driver, or run the pipelines with `kiq pipeline run`"
        )
    return str(context.master)


def check_session(spark: SparkSession, spark_settings: settings.SparkSettings) -> Path | None:
    """Refuse a session that cannot run kiq's queries, with the setting to add; set kiq's
    SQL settings the owner left unset; where kiq's partitioner is (None: not loadable)."""
    context = spark.sparkContext
    jvm = context._jvm
    assert jvm is not None  # _master checked
    loadable = jvm.org.apache.spark.util.Utils.classIsLoadable
    missing = sorted({jar for cls, jar in CONNECTOR_CLASSES.items() if not loadable(cls)})
    if missing:
        raise SetupError(
            f"this Spark session cannot load Spark's Kafka connector (missing: "
            f"{', '.join(missing)}): give it when the session is built, as "
            "spark.jars (the jars `kiq setup --spark-conf` prints) or spark.jars.packages="
            f"{CONNECTOR_PACKAGE}; a running session cannot take jars"
        )
    given = context.getConf()
    for key, value in sql_conf(spark_settings).items():
        if not given.contains(key):
            spark.conf.set(key, value)
    if (
        str(context.master).startswith("local")
        and spark.conf.get("spark.sql.shuffle.partitions") == SPARK_DEFAULT_SHUFFLE
        and not given.contains("spark.sql.shuffle.partitions")
    ):
        log.warning(
            "spark.sql.shuffle.partitions is Spark's default, 200, on a local master: each "
            "stateful query keeps 200 state partitions, slow on a few cores. Set it to the "
            "cores when the session is built (it is fixed in a query's checkpoint)"
        )
    if not loadable(PARTITIONER_CLASS):
        log.info(
            "kiq's partitioner is not on the session's classpath: tables with composite keys "
            "will be refused (add it to spark.jars: `kiq setup --spark-conf`)"
        )
        return None
    return _partitioner_path(given.get("spark.jars", ""), spark_settings)


def _partitioner_path(jars: str, spark_settings: settings.SparkSettings) -> Path:
    """The partitioner jar the session was given (its path is only said in errors)."""
    for jar in jars.split(","):
        if jar.strip().endswith(".jar") and "partitioner" in Path(jar.strip()).name:
            return Path(jar.strip())
    return spark_settings.jars_dir / PARTITIONER / JAR_NAME


__all__ = ["check_session", "run", "session_conf", "start"]

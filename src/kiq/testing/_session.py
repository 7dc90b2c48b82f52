"""The Spark session ``run_pipeline`` runs in: local, made once per process, then reused.

The first call pays for the JVM and Spark's warm-up (a few seconds); later calls run
their batches on the same session. It needs no Kafka connector: nothing is read from or
written to Kafka. Where the process already has a SparkContext (a test suite's own
session), it is shared, as a ``newSession()`` whose SQL settings are kiq.testing's own.

Like ``kiq pipeline run``'s session (``kiq.pipelines.session``) it runs in UTC, so a
timestamp key part is cast to the same text. The Kafka connector's jars are added when
the jar cache has them, only so that a session another test builds later in the same
process (``build_session`` reuses a running context) still finds them.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from kiq.runtime.jars import SPARK, SPARK_CONNECTOR_VERSION
from kiq.runtime.java import java_executable
from kiq.settings import find_jar_cache

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER = "local[2]"
# Set on kiq.testing's own session, whoever made the context: the batches are tiny (one
# shuffle partition is the fastest), and keys are cast to text in UTC as in kiq's runs.
SQL_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.session.timeZone": "UTC"}

_lock = threading.Lock()
_session: SparkSession | None = None
_made_here = False  # whether the running context is one kiq.testing made


def local_session() -> SparkSession:
    """kiq.testing's session: made on first use, made again if its context was stopped."""
    global _session
    with _lock:
        if _session is None or not _running(_session):
            _session = _new_session()
        for key, value in SQL_CONF.items():  # in case a caller changed them
            _session.conf.set(key, value)
        return _session


def stop_session() -> None:
    """Stop the session (and its context) if kiq.testing made them; a later call makes a new
    one. A context that was there before is left running."""
    global _session, _made_here
    with _lock:
        session, _session = _session, None
        made_here, _made_here = _made_here, False
        if session is None or not made_here or not _running(session):
            return
        with contextlib.suppress(Exception):  # its JVM may be gone already
            session.sparkContext.stop()


def _running(session: SparkSession) -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is session.sparkContext


def _new_session() -> SparkSession:
    global _made_here
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate().newSession()
    java_executable()  # a clear message before Spark's launcher fails without one
    builder = SparkSession.builder.master(MASTER).appName("kiq-testing")
    for key, value in _conf().items():
        builder = builder.config(key, value)
    base = builder.getOrCreate()
    base.sparkContext.setLogLevel("ERROR")
    _made_here = True
    atexit.register(stop_session)  # so its JVM ends before the process, not under it
    return base.newSession()


def _conf() -> dict[str, str]:
    log4j = resources.files("kiq.testing").joinpath("log4j2.properties")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j}",
        **SQL_CONF,
    }
    jars = _connector_jars(find_jar_cache())
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    return conf


def _connector_jars(jars_dir: Path) -> list[Path]:
    """The Kafka connector's jars if the cache holds them (never fetched: not needed here)."""
    spark = jars_dir / SPARK
    if not (spark / f"spark-sql-kafka-0-10_2.13-{SPARK_CONNECTOR_VERSION}.jar").is_file():
        return []
    return sorted(spark.glob("*.jar"))

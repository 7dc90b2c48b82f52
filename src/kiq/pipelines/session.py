"""The SparkSession every kiq pipeline runs in.

Spark's Kafka connector (and kiq's partitioner for composite keys) comes from the Maven
jar cache through ``spark.jars``, which ships it to every executor
(never Ivy at run time); streaming state lives in RocksDB with changelog
checkpointing; each query checkpoints under one root, so a restarted pipeline
resumes where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kiq.runtime.jars import CONNECTOR_PACKAGE, partitioner_jar, spark_connector_jars
from kiq.runtime.java import java_executable
from kiq.settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# Checkpoints (offsets, commits, state changelogs) are files in a local directory. Spark's
# default manager renames them through Hadoop's FileContext, which, without Hadoop's native
# library (the pyspark wheel has none), forks `readlink` for every rename: ~15 processes and
# ~150 ms of each micro-batch here. This one renames with one rename(2), atomic on a local disk.
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def sql_conf(settings: SparkSettings) -> dict[str, str]:
    """The SQL settings kiq's queries expect: state in RocksDB with changelog checkpoints,
    times in UTC, local checkpoints renamed in one call. Spark takes them on a running
    session too, so a session kiq did not build gets those its owner left unset."""
    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
    }
    if not settings.checkpoint_uri:
        conf["spark.sql.streaming.checkpointFileManagerClass"] = CHECKPOINT_FILE_MANAGER
    if settings.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
    return conf


def needed_conf(settings: SparkSettings, *, packages: bool = False) -> dict[str, str]:
    """What a Spark session that kiq does not build (``spark-submit``, a notebook) needs
    for kiq's pipelines: the connector's jars (or, with ``packages``, its Maven
    coordinates, which Spark resolves itself), kiq's partitioner, then ``sql_conf`` and the
    user's ``[spark] conf``. The jars must be given when the session starts."""
    jars = [] if packages else spark_connector_jars(settings.jars_dir)
    partitioner = partitioner_jar(settings.jars_dir)
    jars += [partitioner] if partitioner else []
    conf: dict[str, str] = {}
    if packages:
        conf["spark.jars.packages"] = CONNECTOR_PACKAGE
    if jars:
        conf["spark.jars"] = ",".join(str(j.absolute()) for j in jars)
    conf.update(sql_conf(settings))
    conf.update(settings.conf)
    return conf


def spark_conf(settings: SparkSettings, jars: list[Path]) -> dict[str, str]:
    """The Spark settings of a session kiq builds, before the user's ``settings.conf``."""
    conf = {
        "spark.jars": ",".join(str(j) for j in jars),
        **sql_conf(settings),
        "spark.sql.streaming.checkpointLocation": settings.checkpoint_root,
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.enabled": str(settings.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
    }
    local = settings.master.startswith("local")
    if settings.shuffle_partitions or local:
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions or 1)
    if local or _on_loopback(settings.master):
        # A local driver, or one whose cluster runs on this machine's loopback (`kiq spark
        # start`), needs no address beyond loopback; executors elsewhere need the host's.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update(settings.conf)
    return conf


def _on_loopback(master: str) -> bool:
    """A ``spark://`` master on this machine's loopback."""
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    return master.startswith("spark://") and host in ("127.0.0.1", "localhost")


def build_session(settings: SparkSettings, app_name: str | None = None) -> SparkSession:
    """A SparkSession for kiq pipelines (``local[*]`` by default, any master by flag)."""
    from pyspark.sql import SparkSession

    java_executable()  # fail with a clear message before Spark's launcher does not
    jars = spark_connector_jars(settings.jars_dir)
    partitioner = partitioner_jar(settings.jars_dir)
    jars += [partitioner] if partitioner else []
    if not settings.checkpoint_uri:
        Path(settings.checkpoint_root).mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.master(settings.master).appName(app_name or settings.app_name)
    for key, value in spark_conf(settings, jars).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def checkpoint_for(settings: SparkSettings, query_name: str) -> str:
    """The checkpoint directory of one streaming query: one per query, never shared."""
    return f"{settings.checkpoint_root}/{query_name}"

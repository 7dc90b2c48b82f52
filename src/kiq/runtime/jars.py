"""The Maven jar cache that `make jars` fills from jvm/*/pom.xml.

Layout under the jars dir: ``kafka/`` holds the broker and its runtime
dependencies; ``spark/`` holds Spark's Kafka connector and the three jars the
pyspark wheel lacks, at ``SPARK_CONNECTOR_VERSION`` (not pyspark's: see below);
``kiq/`` holds kiq's own Kafka partitioner, compiled from ``jvm/kiq-partitioner``.
The settings find the cache of the checkout kiq runs in
(``kiq.settings.find_jar_cache``); elsewhere, as from an installed wheel, a setting names it.
"""

from __future__ import annotations

from pathlib import Path

from kiq.errors import SetupError

# jvm/kiq-partitioner: composite keys to their first part's partition, and the producer
# setting (one per topic) that names a topic's key separator.
PARTITIONER_CLASS = "io.kiq.kafka.KeyPrefixPartitioner"
SEPARATOR_OPTION = "kiq.key.separator."
# The connector version jvm/spark-connector/pom.xml pins. Maven Central has no Spark 4.3
# artifacts yet; the 4.2.0 connector runs on the pyspark 4.3.0 runtime for what kiq does,
# which tests/integration/test_spark_compat.py checks on every run.
SPARK_CONNECTOR_VERSION = "4.2.0"


def _fix(section: str) -> str:
    return (
        "run `make jars` (or `make setup`) in the kiq checkout and run kiq inside it, "
        f"or set [{section}] jars_dir (KIQ_{section.upper()}_JARS_DIR) to a jar cache"
    )


def kafka_broker_classpath(jars_dir: Path) -> str:
    """A java ``-cp`` value with every broker jar."""
    kafka = jars_dir / "kafka"
    if not any(kafka.glob("kafka_2.13-*.jar")):
        raise SetupError(f"the Kafka broker jars are not in {kafka}: {_fix('broker')}")
    return str(kafka / "*")


def spark_connector_jars(
    jars_dir: Path, spark_version: str = SPARK_CONNECTOR_VERSION
) -> list[Path]:
    """The jars to hand Spark as ``spark.jars`` for the Kafka source and sink."""
    spark = jars_dir / "spark"
    connector = spark / f"spark-sql-kafka-0-10_2.13-{spark_version}.jar"
    if not connector.exists():
        found = sorted(p.name for p in spark.glob("spark-sql-kafka-*.jar"))
        detail = f" (found {', '.join(found)})" if found else ""
        raise SetupError(
            f"Spark's Kafka connector {spark_version} is not in {spark}{detail}: " + _fix("spark")
        )
    return sorted(spark.glob("*.jar"))


def partitioner_jar(jars_dir: Path) -> Path | None:
    """kiq's composite-key partitioner, if `make jars` built it (only composite keys need it)."""
    jar = jars_dir / "kiq" / "kiq-partitioner.jar"
    return jar if jar.is_file() else None

"""PySpark Structured Streaming pipelines that derive kiq's tables from Kafka topics."""

from kiq.pipelines.session import build_session, checkpoint_for, spark_conf

__all__ = ["build_session", "checkpoint_for", "spark_conf"]

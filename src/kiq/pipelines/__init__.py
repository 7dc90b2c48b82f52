"""PySpark Structured Streaming pipelines that derive kiq's tables from Kafka topics.

A pipeline is a function given a ``Context`` (``kiq.Context``); ``runner`` runs
targets in one Spark session, ``session`` builds that session.
"""

from kiq.pipelines.session import build_session, checkpoint_for, spark_conf

__all__ = ["build_session", "checkpoint_for", "spark_conf"]

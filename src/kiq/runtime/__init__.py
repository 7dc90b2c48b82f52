"""The local runtime kiq brings along: Java, the JVM jar cache and a Kafka broker.

For development, tests and the demo. Production points kiq at an existing Kafka
cluster and Spark master instead (docs/guides/configuration.md).
"""

from kiq.runtime.broker import BrokerStatus, LocalBroker
from kiq.runtime.jars import kafka_broker_classpath, spark_connector_jars
from kiq.runtime.java import java_executable
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline
from kiq.runtime.ports import free_port, free_ports

__all__ = [
    "BrokerStatus",
    "LocalBroker",
    "LocalNode",
    "LocalPipeline",
    "free_port",
    "free_ports",
    "java_executable",
    "kafka_broker_classpath",
    "spark_connector_jars",
]

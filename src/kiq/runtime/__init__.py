"""The local runtime kiq brings along: Java, the JVM jar cache and a Kafka broker.

For development, tests and the demo. Production points kiq at an existing Kafka
cluster and Spark master instead (docs/guides/configuration.md).

Nothing is imported here: a serving node uses ``signals``, ``ports`` and ``processes``
(its read workers), and must not load the launcher (``broker``, ``nodes``,
``pipelines``, ``spark_cluster``, ...) with them. Import each from its own module.
"""

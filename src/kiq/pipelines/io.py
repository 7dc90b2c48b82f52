"""Where a pipeline's reads come from and its tables go: Kafka and Spark streaming, or a test's.

``Context`` checks, keys and shapes the DataFrames; what it reads from and writes to
is this one collaborator, handed to it at construction. ``KafkaIO`` is the real one:
topics on a broker, streaming queries with checkpoints, the catalog topic.
``kiq.testing`` runs the same ``Context`` over rows given in Python, in a batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError, SetupError
from kiq.kafka import compacted, create_topics, topic_partitions
from kiq.pipelines.kafka_io import StreamOptions, read_topics, write_topic
from kiq.runtime.jars import PARTITIONER_CLASS, SEPARATOR_OPTION
from kiq.tables import compatible
from kiq.tables.declared import Declared, decode_catalog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

Mode = Literal["update", "append"]


class PipelineIO(Protocol):
    """What a ``Context`` reads from and writes to."""

    def partitions(self, topic: str) -> int | None:
        """``topic``'s partition count; None when it does not exist."""
        ...

    def create(self, topics: Mapping[str, int], config: Mapping[str, str]) -> None:
        """Create the topics that are missing (name → partitions) with ``config``."""
        ...

    def read(self, topic: str, *, realtime: bool) -> DataFrame:
        """``topic``'s records as Spark's Kafka source gives them (key, value, topic,
        partition, offset, timestamp, ...)."""
        ...

    def sink_options(self, composite: Mapping[str, str]) -> dict[str, str]:
        """Sink options that send composite keys (topic → separator) to their first
        part's partition."""
        ...

    def declare(self, tables: Sequence[Declared]) -> None:
        """Record ``tables`` in the table catalog before their query writes them."""
        ...

    def start(
        self,
        frame: DataFrame,
        name: str,
        *,
        realtime: bool,
        mode: Mode = "update",
        options: Mapping[str, str] | None = None,
        interval: str | None = None,
        markers: Sequence[str] = (),
    ) -> StreamingQuery:
        """Start the query ``name`` writing ``frame``'s records (topic, key, value,
        partition, headers) to their topics; a micro-batch query every ``interval`` (None:
        the pipeline's). ``markers``: the table topics of a consistent query, each
        partition of which gets a marker after each micro-batch (``kiq.markers``)."""
        ...


class KafkaIO:
    """Topics on a broker and streaming queries: what ``kiq pipeline run`` gives a pipeline."""

    def __init__(
        self, spark: SparkSession, opts: StreamOptions, partitioner_jar: Path | None
    ) -> None:
        self._spark = spark
        self._opts = opts
        self._partitioner_jar = partitioner_jar

    def partitions(self, topic: str) -> int | None:
        return topic_partitions(self._opts.bootstrap, topic, security=self._opts.security)

    def create(self, topics: Mapping[str, int], config: Mapping[str, str]) -> None:
        if topics:
            create_topics(
                self._opts.bootstrap,
                dict(topics),
                config=config,
                security=self._opts.security,
            )

    def read(self, topic: str, *, realtime: bool) -> DataFrame:
        return read_topics(self._spark, self._opts, topic, realtime=realtime)

    def sink_options(self, composite: Mapping[str, str]) -> dict[str, str]:
        if not composite:
            return {}
        if self._partitioner_jar is None:
            raise SetupError(
                f"tables {sorted(composite)} have composite keys, whose partitioner "
                "(kiq's KeyPrefixPartitioner) is not in the jar cache: run `kiq setup` "
                "(or `make jars` in the kiq checkout)"
            )
        options = {"kafka.partitioner.class": PARTITIONER_CLASS}
        options |= {f"kafka.{SEPARATOR_OPTION}{t}": sep for t, sep in composite.items()}
        return options

    def declare(self, tables: Sequence[Declared]) -> None:
        bootstrap, security = self._opts.bootstrap, self._opts.security
        compacted.ensure(bootstrap, CATALOG_TOPIC, security=security)
        found = compacted.read_latest(bootstrap, CATALOG_TOPIC, security=security)
        changed: dict[str, bytes | None] = {}
        for table in tables:
            # Each version of a table is a record of its own: v2 is compared with v2 only.
            declared = decode_catalog(found, app=table.app)
            old = declared.get(table.name)
            if old == table:
                continue
            if old is not None:
                # Refused before anything is written: the topic holds the old shape.
                refused = compatible.incompatible(old, table)
                if refused:
                    taken = {d.version for d in declared.values() if d.table == table.table}
                    raise ConfigError(compatible.refusal(old, table, refused, taken))
                # A record from before checkpoints or shapes were recorded gains them quietly.
                others = compatible.compatible_changes(old, table)
                if others:
                    log.warning(
                        "catalog: table %s was declared by %s and is now declared by %s (%s); "
                        "the topic keeps records written under the old declaration",
                        table.name,
                        old.describe(),
                        table.describe(),
                        "; ".join(others),
                    )
            changed[table.catalog_key] = table.encode()
        if changed:
            compacted.put(bootstrap, CATALOG_TOPIC, changed, security=security)
            log.info("catalog: declared tables=%s", ",".join(sorted(t.name for t in tables)))

    def start(
        self,
        frame: DataFrame,
        name: str,
        *,
        realtime: bool,
        mode: Mode = "update",
        options: Mapping[str, str] | None = None,
        interval: str | None = None,
        markers: Sequence[str] = (),
    ) -> StreamingQuery:
        return write_topic(
            frame,
            self._opts,
            None,
            name,
            realtime=realtime,
            mode=mode,
            options=options,
            interval=interval,
            markers=markers,
        )

"""A consistent query's sink: each micro-batch written, then marked (``kiq.markers``).

``ctx.write_table(..., consistent=True)`` writes through ``foreachBatch``: the batch's
records go to Kafka as a batch write with the options the streaming sink takes
(``kafka_io.sink_options``), and only once that write has returned does the driver write
the batch's marker to every partition of each table topic of the query (never to its
dead letters), acknowledged before ``foreachBatch`` returns. Spark commits a batch after
its ``foreachBatch`` returns, so a batch is never committed without its markers, and
every record of batch B sits after B-1's marker and before B's in its partition. A
batch Spark runs again (a failure, a restart) writes its records and markers again:
the marker's batch id is the same, so a reader sees one batch once more, never a
half one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kiq.kafka.batch_markers import MarkerProducer
from kiq.kafka.security import KafkaSecurity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class MarkedBatches:
    """The ``foreachBatch`` function of a consistent query writing to ``tables``: ``sink``
    the Kafka options of its batch writes, ``bootstrap`` and ``security`` its markers'."""

    def __init__(
        self,
        sink: Mapping[str, str],
        tables: Sequence[str],
        bootstrap: str,
        security: KafkaSecurity,
    ) -> None:
        if not tables:
            raise ValueError("a consistent query marks at least one table topic")
        self._bootstrap = bootstrap
        self._security = security
        self._sink = dict(sink)
        self.tables = tuple(dict.fromkeys(tables))
        self._producer: MarkerProducer | None = None
        self._lock = threading.Lock()  # one producer, however Spark calls back

    def _markers(self) -> MarkerProducer:
        with self._lock:
            if self._producer is None:
                self._producer = MarkerProducer(self._bootstrap, security=self._security)
            return self._producer

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.write.format("kafka").options(**self._sink).save()
        marked = self._markers().mark(self.tables, batch_id)
        log.debug("batch %d written and marked (%d markers)", batch_id, marked)

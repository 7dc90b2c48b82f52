"""An orderly stop that leaves no ERROR in the driver's log.

Stopping a query interrupts the batch it runs (a Real-Time Mode batch always runs): Spark
aborts the batch's uncommitted write and logs that as an ERROR, though the batch is simply
run again at the next start, from the checkpoint. And the tasks of that cancelled batch end
a moment after the query has: a session stopped under them fails their completion
listeners (more ERRORs, and stack traces). So on an orderly stop kiq silences the few
loggers that report an interrupted batch, and waits for the tasks before the session
stops. A failed query's stop changes nothing: its errors are logged as Spark says them.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The loggers that say an interrupted batch was aborted, and what its tasks say as they end.
INTERRUPTED_BATCH_LOGGERS = (
    # "Data source write support MicroBatchWrite[epoch: N, ...] is aborting / aborted"
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    # and each of its tasks: "Aborting commit for partition N" / "Aborted commit ..."
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    # Real-Time Mode: "A fatal error has occurred" as a cancelled task's shuffle writer closes
    "org.apache.spark.util.ErrorNotifier",
    # a task's completion listeners failing as the session goes (should the wait time out)
    "org.apache.spark.TaskContextImpl",
    # "Exception encountered" from the same listeners (SparkEnv already gone)
    "org.apache.spark.util.Utils",
    # a cancelled task's "Exception in task" as its batch is interrupted
    "org.apache.spark.executor.Executor",
    # "Task ... failed" / "Lost task" for tasks cancelled by the stop
    "org.apache.spark.scheduler.TaskSetManager",
    # "Exception in statusUpdate": a cancelled task's last status reaching a result pool
    # that the stopping session has already shut
    "org.apache.spark.scheduler.TaskSchedulerImpl",
)
TASKS_TIMEOUT_S = 15.0


def quiet_interrupted_batches(spark: SparkSession) -> None:
    """Before an orderly stop: the interrupted batch's aborts are no error here."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in INTERRUPTED_BATCH_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)


def wait_for_tasks(spark: SparkSession, timeout_s: float = TASKS_TIMEOUT_S) -> None:
    """Until the stopped queries' last tasks have ended (they outlive the query's stop by a
    moment), so that the session does not stop under them."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    while tracker.getActiveStageIds():
        if time.monotonic() > deadline:
            log.info("tasks still running after %.0fs: stopping spark anyway", timeout_s)
            return
        time.sleep(0.1)

"""Which trigger a query runs with, and the task slots Real-Time Mode needs.

A Real-Time Mode batch runs every task of the query at once for its whole duration:
one per input Kafka partition, and, when the query keeps state, one per shuffle
partition. Spark does not check that the slots are there: with too few, the tasks run
in waves and a record waits for the next wave (measured: 12 partitions on ``local[8]``
made each 5-second batch last 12 s). So kiq counts them before a query starts:

- local master ``local[N]``: N ≥ the sum, over the session's real-time queries, of
  their input partitions plus their shuffle partitions;
- a cluster: executors x ``spark.executor.cores`` / ``spark.task.cpus`` ≥ the same sum.

``auto`` (the default) runs a query in Real-Time Mode when Spark supports it and the
slots are there, else in micro-batches, saying why in one log line; ``realtime`` makes
either an error instead.

Slots are threads on a local master, and a real-time task holds its thread for the
whole batch, but most of that time it waits on Kafka: on 2 cores the stock pipeline's
61 tasks (30 partitions) kept up with 500 ticks/s at a p50 of 32 ms. What a small
machine cannot give is the CPU per record: Real-Time Mode updates the state and
writes the changed rows for every tick, where a micro-batch folds a batch's ticks per
group first (about 1.7 ms of CPU per tick against 0.15 ms), so on 2 cores Real-Time
Mode fell behind at 1,000 ticks/s where micro-batches carried 10,000
(docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence

from kiq.errors import ConfigError
from kiq.pipelines.kafka_io import Trigger

log = logging.getLogger(__name__)

# Queries of a pipeline the size of its input that a local master makes room for.
LOCAL_QUERIES = 4

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def local_slots(master: str) -> int | None:
    """Task slots of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``);
    None for any other master."""
    match = _LOCAL.match(master.strip())
    if match is None:
        return None
    n = match.group(1)
    if n is None:
        return 1
    return os.cpu_count() or 1 if n == "*" else int(n)


def realtime_tasks(partitions: int, shuffle_partitions: int) -> int:
    """Tasks at once of a stateful real-time query over ``partitions`` inputs: those, its
    shuffle partitions, and the micro-batch query of its dead letters (at most as many as
    inputs; one on a local master, which reads an input in one task per micro-batch)."""
    return 2 * partitions + shuffle_partitions


def realtime_local_master(partitions: int, shuffle_partitions: int) -> str:
    """The local master kiq uses for ``local[*]`` when queries may run in real time: room for
    ``LOCAL_QUERIES`` stateful queries with their dead letters. A slot is a counter, and its
    thread exists only while a task runs, so room to spare costs nothing; too little fails a
    real-time query when its batch starts."""
    tasks = LOCAL_QUERIES * realtime_tasks(partitions, shuffle_partitions)
    return f"local[{max(tasks, os.cpu_count() or 1)}]"


# Why a consistent query (``ctx.write_table(consistent=True)``) never runs in Real-Time Mode.
CONSISTENT_REASON = (
    "it is consistent=True, which marks a snapshot at the end of each batch, and a Real-Time "
    "Mode batch lasts minutes (--realtime-batch), so each snapshot would be minutes old"
)
CONSISTENT_FIX = (
    "use the micro-batch trigger (--trigger microbatch or auto), or drop consistent=True"
)


def refuse_consistent(trigger: Trigger, query: str) -> None:
    """A ``ConfigError`` when Real-Time Mode is asked for a consistent query, before the query
    declares anything; under ``auto`` it runs in micro-batches (``runs_in_realtime``)."""
    if trigger == "realtime":
        raise ConfigError(
            f"query {query} cannot run in Real-Time Mode: {CONSISTENT_REASON}; {CONSISTENT_FIX}"
        )


def runs_in_realtime(
    trigger: Trigger,
    query: str,
    blockers: Sequence[str],
    need: int,
    free: int,
    master: str,
    *,
    consistent: bool = False,
) -> bool:
    """Whether ``query`` runs in Real-Time Mode; an error if ``realtime`` was asked for and
    it cannot, one log line if ``auto`` falls back to micro-batches. A ``consistent`` query
    never does (``CONSISTENT_REASON``)."""
    if trigger == "microbatch":
        return False
    if consistent:
        refuse_consistent(trigger, query)
        log.info("query %s runs in micro-batches, not Real-Time Mode: %s", query, CONSISTENT_REASON)
        return False
    reason = ""
    if blockers:
        reason = f"Spark does not run {', '.join(blockers)} in Real-Time Mode"
    elif need > free:
        reason = (
            f"it needs {need} task slots at once (each input partition and shuffle partition "
            f"runs for the whole batch) and master {master} has {free} left"
        )
    if not reason:
        return True
    if trigger == "realtime":
        fix = (
            "use --trigger microbatch (or auto)"
            if blockers
            else "give Spark more task slots (local[N] with a larger N; executors x cores on "
            "a cluster), fewer input partitions, or --trigger microbatch"
        )
        raise ConfigError(f"query {query} cannot run in Real-Time Mode: {reason}; {fix}")
    log.info("query %s runs in micro-batches, not Real-Time Mode: %s", query, reason)
    return False

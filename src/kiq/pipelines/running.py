"""Started pipelines: their queries, watched until a stop or the first failure.

One watch serves every way of running: `kiq pipeline run` watches in its main thread, and
``kiq.pipelines.start`` in a thread of its own beside the caller's code. Every second it
checks that each query still runs, logs batch times now and then (``ProgressLog``), and
publishes each query's progress to ``kiq-progress``. On a stop it stops the queries in
order (their interrupted batches are no error, their tasks end before it returns) and
publishes their last records, "stopped", or "failed" with why. The Spark session is left to
whoever owns it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kiq.pipelines.jvm_hook import JvmStopHook
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.progress import ProgressPublisher
from kiq.pipelines.shutdown import quiet_interrupted_batches, wait_for_tasks
from kiq.progress import State
from kiq.runtime.pipeline_errors import PipelineFailed, PipelineFailure, brief

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

WATCH_EVERY_S = 1.0


class ProgressLog:
    """Every ``every_s``, one log line per query with its batch durations since the last line.

    Batch time is where freshness goes; the log is how to see it without Spark's UI.
    """

    def __init__(self, queries: Sequence[StreamingQuery], every_s: float = 15.0) -> None:
        self.queries = queries
        self.every_s = every_s
        self.next_at = time.monotonic() + every_s
        self.seen: dict[str, int] = {}

    def maybe_log(self) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.every_s
        for q in self.queries:
            try:
                recent = q.recentProgress
            except Exception:  # a stopping query must not stop the runner
                continue
            last = self.seen.get(q.name, -1)
            new = [p for p in recent if p.batchId > last]
            if not new:
                continue
            self.seen[q.name] = new[-1].batchId
            took = sorted(p.durationMs.get("triggerExecution", 0) for p in new)
            rows = sum(p.numInputRows for p in new)
            log.info(
                "progress query=%s batches=%d rows=%d batch_ms_p50=%d batch_ms_max=%d last=%s",
                q.name,
                len(new),
                rows,
                took[len(took) // 2],
                took[-1],
                new[-1].durationMs,
            )


class Pipelines(Sequence["StreamingQuery"]):
    """The started queries of one run of pipelines (a sequence of them), and their watch.

    ``stop()`` ends them gracefully; ``wait()`` blocks until they ended, raising
    ``PipelineFailed`` when one failed. ``kiq pipeline run`` and ``kiq.pipelines.run`` call
    ``watch()`` themselves; ``kiq.pipelines.start`` watches in a thread.
    """

    def __init__(
        self,
        spark: SparkSession,
        name: str,
        opts: StreamOptions,
        *,
        app: str,
        owned: Sequence[tuple[str, str, StreamingQuery]],
        checkpoints: dict[str, str],
        stop_event: threading.Event | None = None,
    ) -> None:
        self.spark = spark
        self.name = name
        self.app = app
        self.queries: list[StreamingQuery] = [q for _, _, q in owned]
        self._opts = opts
        self._owned = list(owned)
        self._checkpoints = checkpoints  # query name -> its pipeline's checkpoint root
        self._stop = stop_event or threading.Event()
        self._done = threading.Event()
        self._failure: PipelineFailed | None = None
        self._thread: threading.Thread | None = None
        self._watching = False

    def __getitem__(self, index: int) -> StreamingQuery:  # type: ignore[override]
        return self.queries[index]

    def __len__(self) -> int:
        return len(self.queries)

    def __iter__(self) -> Iterator[StreamingQuery]:
        return iter(self.queries)

    def __repr__(self) -> str:
        state = "running" if self.active else "failed" if self._failure else "stopped"
        return f"<Pipelines {self.name} {state}: {', '.join(q.name for q in self.queries)}>"

    @property
    def active(self) -> bool:
        """Whether the queries still run (neither stopped nor failed)."""
        return not self._done.is_set()

    @property
    def stopping(self) -> threading.Event:
        """Set to stop: signal handlers and the JVM's shutdown hook set it."""
        return self._stop

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the queries gracefully and publish their last progress; the session runs on.
        Idempotent; a failure already raised by ``wait`` is not raised again."""
        self._stop.set()
        if self._watching:
            self._done.wait(timeout_s)
        elif not self._done.is_set():
            self._finish(None)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the queries stopped (True) or ``timeout_s`` passed (False); raise
        ``PipelineFailed`` when one failed."""
        ended = self._done.wait(timeout_s)
        if self._failure is not None:
            raise self._failure
        return ended

    def watch(self) -> None:
        """Until a stop or a failure: progress published, then the queries stopped in order.
        Raises ``PipelineFailed`` for a failed query."""
        self._watching = True
        hook = JvmStopHook(self.name, self._stop, self._done.wait)
        hook.install(self.spark)
        for q in self.queries:
            log.info("query started pipeline=%s query=%s id=%s", self.name, q.name, q.id)
        failed: StreamingQuery | None = None
        progress = ProgressLog(self.queries)
        published = ProgressPublisher(
            self._opts.bootstrap, self._owned, app=self.app, security=self._opts.security
        )
        try:
            while not self._stop.wait(WATCH_EVERY_S):
                failed = next((q for q in self.queries if not q.isActive), None)
                if failed is not None:
                    break
                progress.maybe_log()
                published.maybe_publish()
        finally:
            try:
                published.close(_final_states(self.queries, failed))
            except Exception as exc:  # py4j errors from a JVM already shutting down
                log.info("last progress not published: %s", exc)
            self._finish(failed)
            hook.remove()
        if self._failure is not None:
            raise self._failure

    def watch_in_background(self) -> None:
        """``watch`` in a daemon thread: the caller's code goes on (a notebook's cell)."""
        self._thread = threading.Thread(
            target=self._watch_quietly, name=f"kiq-pipelines-{self.name}", daemon=True
        )
        self._thread.start()

    def _watch_quietly(self) -> None:
        try:
            self.watch()
        except PipelineFailed:
            pass  # logged, and kept for wait()
        except Exception:
            log.exception("pipelines watch ended on an error pipeline=%s", self.name)
            self._done.set()

    def _finish(self, failed: StreamingQuery | None) -> None:
        """Stop every query; a failed one's error becomes ``self._failure``."""
        error = stop_queries(self.queries, self.spark, failed)
        log.info("pipeline stopped name=%s", self.name)
        if failed is not None:
            hint = stale_state_hint(str(error), self._checkpoints.get(failed.name, ""))
            failure = PipelineFailure(
                self.name, type(error).__name__, brief(str(error)), failed.name, hint
            )
            log.error("%s", failure.log_line())
            self._failure = PipelineFailed(failure)
        self._done.set()


# Spark's error conditions for a checkpoint whose state another version of a query wrote
# (or a micro-batch query wrote, in a format Real-Time Mode does not resume from, or with
# its dead letters in the same query, which reads its input twice: two sources).
_STALE_STATE = (
    "SCHEMA_NOT_COMPATIBLE",
    "StateSchemaNotCompatible",
    "STATEFUL_OPERATOR_NOT_MATCH",
    "CHECKPOINT_FORMAT_V1_NOT_SUPPORTED",
    "sources in the checkpoint offsets",
)


def stale_state_hint(error: str, checkpoint_root: str) -> str:
    """What to do when an upgrade changed a query's state: its checkpoint cannot be reused."""
    if "STREAMING_REAL_TIME_MODE" in error and "CHECKPOINT_FORMAT_V1" not in error:
        return (
            "\n(Spark refused the query in Real-Time Mode, which kiq's own check did not "
            "foresee: run it with --trigger microbatch)"
        )
    if not any(marker in error for marker in _STALE_STATE):
        return ""
    return (
        f"\n(the checkpoint {checkpoint_root} holds state that another version of this pipeline "
        "wrote, or the same one under another trigger: stop the pipeline, delete that "
        "directory and start again, and the tables are derived again from the input topic, "
        "read from its start; or run it with the trigger it was written with; or run the "
        "changed pipeline as a new version beside this one: kiq pipeline run --version NEW)"
    )


def _final_states(
    queries: Sequence[StreamingQuery], failed: StreamingQuery | None
) -> dict[str, tuple[State, str]]:
    """What each query's last progress record says: stopped, or failed and why."""
    states: dict[str, tuple[State, str]] = {q.name: ("stopped", "") for q in queries}
    if failed is not None:
        try:
            reason = str(failed.exception() or "")
        except Exception:  # a JVM already going away
            reason = ""
        states[failed.name] = ("failed", reason.strip().splitlines()[0] if reason.strip() else "")
    return states


def stop_queries(
    queries: Sequence[StreamingQuery], spark: SparkSession, failed: StreamingQuery | None
) -> Exception | None:
    """Stop the queries, and wait for their tasks; returns the failed query's exception.

    A signal sent to the whole process group (Ctrl-C in a terminal) reaches the JVM too,
    whose shutdown hook may stop the SparkContext under our feet (kiq's own hook, in
    ``kiq.pipelines.jvm_hook``, runs first, but a second signal or a hard stop does not
    wait): then each call here raises, and there is nothing left to stop but a line to log.
    """
    error: Exception | None = None
    try:
        if failed is None:
            quiet_interrupted_batches(spark)
        for q in queries:
            if q.isActive:
                q.stop()
        error = failed.exception() if failed is not None else None
        wait_for_tasks(spark)
    except Exception as exc:  # py4j errors from a JVM that is already shutting down
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("spark already stopping on its own (the signal reached the JVM): %s", first)
    return error

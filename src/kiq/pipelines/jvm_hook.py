"""A graceful stop when the JVM is told to stop first.

Under ``spark-submit`` the driver's JVM is the parent process and Python its child: a
SIGTERM (a scheduler cancelling the job, Kubernetes stopping the pod) reaches the JVM
alone, whose shutdown hooks stop the SparkContext under the queries, and Python is never
told. A Ctrl-C in a terminal reaches both at once, with the same race. So kiq registers a
hook of its own in the JVM, implemented in Python through py4j's callback server, at a
priority above Spark's (Hadoop's ``ShutdownHookManager`` runs hooks one at a time, highest
first; Spark's run at ``FileSystem.SHUTDOWN_HOOK_PRIORITY + 30`` = 40). It asks the
pipelines to stop, and returns when they have: their queries stopped and their last
progress published while the SparkContext still runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PRIORITY = 50  # above Spark's 40, so the SparkContext is still up while the queries stop
WAIT_S = 30  # how long the JVM waits for the queries to stop before it goes on


class JvmStopHook:
    """A ``java.lang.Runnable`` the JVM calls at shutdown: it sets ``stopping`` and waits
    (``wait(seconds)``) for what it stops; ``remove`` once that stopped otherwise."""

    def __init__(
        self,
        name: str,
        stopping: threading.Event,
        wait: Callable[[float], object],
        wait_s: float = WAIT_S,
    ) -> None:
        self._name = name
        self._stopping = stopping
        self._wait = wait
        self._wait_s = wait_s
        self._manager: Any = None
        self._thread: Any = None
        self._called = threading.Event()
        self._left = threading.Event()

    # -- what the JVM calls (py4j looks these up by their Java names) ---------------------

    def run(self) -> None:
        self._called.set()
        try:
            log.info("the JVM is shutting down: stopping pipeline=%s", self._name)
            self._stopping.set()
            with contextlib.suppress(Exception):  # a failure is the watch's to report
                self._wait(self._wait_s)
        finally:
            self._left.set()

    def hashCode(self) -> int:
        return id(self) & 0x7FFFFFFF

    def equals(self, other: object) -> bool:
        return other is self

    def toString(self) -> str:
        return f"kiq-pipelines-stop[{self._name}]"

    class Java:
        implements: ClassVar[list[str]] = ["java.lang.Runnable"]

    # -- from Python -------------------------------------------------------------------------

    def install(self, spark: SparkSession) -> bool:
        """Register in the session's JVM; False (and a log line) where that cannot be done."""
        try:
            from pyspark.java_gateway import ensure_callback_server_started

            context = spark.sparkContext
            gateway = context._gateway
            ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
            jvm = context._jvm
            assert jvm is not None
            seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
            manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
            # Registered as a Java Thread around this Runnable (run, not started, by the
            # manager): the one object ``remove`` can name again (py4j makes a new proxy of
            # a Python object each time it crosses).
            thread = jvm.java.lang.Thread(self, f"kiq-pipelines-stop-{self._name}")
            manager.addShutdownHook(thread, PRIORITY, int(self._wait_s) + 5, seconds)
            self._manager, self._thread = manager, thread
        except Exception as exc:  # another Spark's internals: stop by signal alone
            log.info("no JVM shutdown hook for the pipelines (a signal still stops them): %s", exc)
            return False
        return True

    def remove(self) -> None:
        """Unregister once the pipelines stopped; if the JVM already called the hook, let its
        answer reach the JVM before Python goes on (and perhaps exits)."""
        if self._called.is_set():
            self._left.wait(self._wait_s)
            time.sleep(0.2)  # the callback's reply is written after run() returns
            return
        if self._manager is None:
            return
        try:
            if not self._manager.removeShutdownHook(self._thread):
                log.info("the JVM shutdown hook was not found to remove pipeline=%s", self._name)
        except Exception as exc:  # a JVM shutting down refuses: nothing left to remove
            log.debug("shutdown hook not removed: %s", exc)
        self._manager = self._thread = None

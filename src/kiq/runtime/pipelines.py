"""A pipeline (Spark driver) as a local process, for the demo, benchmarks and tests.

The driver runs in a session of its own, so ``kill`` takes the Python driver and
the JVM it started down together, like a crashed machine would. Stopped on an error, it
leaves why beside its log (``error_file``, ``kiq.runtime.pipeline_errors``): ``stopped``
says it without reading Spark's log lines.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kiq.runtime import processes
from kiq.runtime.pipeline_errors import ERROR_FILE_ENV, PipelineFailure

# A driver that left no error file: the last lines of its log that are not JVM frames.
TAIL_LINES = 8


@dataclass
class LocalPipeline:
    # pipeline targets, run in one driver: ("stocks", "wordcount"), ("app.py:build",)
    targets: tuple[str, ...]
    bootstrap: str
    checkpoint_dir: Path
    log_file: Path
    # local[*]: kiq sizes it, with room for Real-Time Mode's tasks (kiq.pipelines.realtime)
    master: str = "local[*]"
    trigger: str = "auto"
    partitions: int = 30
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # over this process's environment
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> LocalPipeline:
        if self.running:
            return self
        cmd = [sys.executable, "-m", "kiq", "pipeline", "run", *self.targets]
        cmd += ["--bootstrap", self.bootstrap, "--master", self.master]
        cmd += ["--checkpoint", str(self.checkpoint_dir), "--trigger", self.trigger]
        cmd += ["--partitions", str(self.partitions), *self.extra_args]
        self.error_file.unlink(missing_ok=True)  # an earlier run's
        env = {**self.env, ERROR_FILE_ENV: str(self.error_file)}
        self.proc = processes.spawn(cmd, log_file=self.log_file, env=env, new_session=True)
        return self

    @property
    def error_file(self) -> Path:
        """Where the driver writes why it stopped (JSON), beside its log."""
        return self.log_file.with_name(f"{self.log_file.stem}.error.json")

    def failure(self) -> PipelineFailure | None:
        """Why the driver stopped, as it said, or None (still running, or stopped cleanly
        or killed, with nothing to say)."""
        return PipelineFailure.read(self.error_file)

    def stopped(self) -> str:
        """What to tell the user of a driver that exited: its error and where the rest is."""
        failure = self.failure()
        if failure is not None:
            return f"{failure.summary()}\n(the whole log: {self.log_file})"
        code = self.proc.returncode if self.proc is not None else None
        return (
            f"the Spark pipelines stopped (exit code {code}); see {self.log_file}:\n{self.tail()}"
        )

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The log's last lines, JVM stack frames left out."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        kept = [line for line in text.splitlines() if not line.lstrip().startswith("at ")]
        return "\n".join(kept[-lines:])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the driver and its JVM: no clean shutdown, no final commit."""
        if self.proc is not None:
            processes.stop(self.proc, signal=signal.SIGKILL, grace_s=30, group=True)

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc is None or not self.running:
            return
        # The driver alone: it stops its queries and then the JVM. A SIGTERM to the
        # group would start the JVM's own shutdown under the driver's feet. Past the
        # grace, SIGKILL to the group; and the JVM may outlive a driver that was told to
        # stop, so its group is SIGKILLed once the driver is gone either way.
        processes.stop(self.proc, grace_s=timeout_s, sweep_group=True)

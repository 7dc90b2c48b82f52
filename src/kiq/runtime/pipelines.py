"""A pipeline (Spark driver) as a local process, for the demo, benchmarks and tests.

The driver runs in a session of its own, so ``kill`` takes the Python driver and
the JVM it started down together, like a crashed machine would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kiq.runtime.processes import spawn_logged


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
        self.proc = spawn_logged(cmd, self.log_file, self.env, new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the driver and its JVM: no clean shutdown, no final commit."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc is None or not self.running:
            return
        # The driver alone: it stops its queries and then the JVM. A SIGTERM to the
        # group would start the JVM's own shutdown under the driver's feet.
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            # the JVM may outlive a driver that was told to stop
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

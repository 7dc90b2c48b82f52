"""`kiq proxy` as a local process, for benchmarks and tests: started in front of some
nodes on a loopback port, ready once it relays a node's liveness answer."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiq.errors import KiqError
from kiq.http_client import HttpError, get
from kiq.runtime import processes
from kiq.runtime.ports import free_port


@dataclass
class LocalProxy:
    nodes: Sequence[str]
    log_file: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> LocalProxy:
        """Start it and wait until it answers (through a node)."""
        cmd = [sys.executable, "-m", "kiq", "proxy", "--nodes", ",".join(self.nodes)]
        cmd += ["--port", str(self.port)]
        self.proc = processes.spawn(cmd, log_file=self.log_file, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise KiqError(f"kiq proxy exited; see {self.log_file}")
            try:
                if get(f"{self.url}/v1/health/live", timeout_s=2).status_code == 200:
                    return self
            except HttpError:
                pass
            time.sleep(0.1)
        raise KiqError(f"kiq proxy did not answer in {timeout_s:.0f}s; see {self.log_file}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is not None and self.running:
            processes.stop(self.proc, grace_s=timeout_s)

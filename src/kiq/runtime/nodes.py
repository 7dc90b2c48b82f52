"""Serving nodes as local processes, for the demo, benchmarks and tests.

Each node is a `kiq serve` subprocess on a loopback port with its own data
directory and log file; ``kill`` is a real SIGKILL, ``stop`` a graceful SIGTERM.
With ``tls`` the node serves HTTPS, and every request made here (readiness,
metadata) verifies it against the settings' CA.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiq.catalog import SHIPPED_ENDPOINTS
from kiq.errors import KiqError
from kiq.http_client import HttpError, Response, get
from kiq.runtime import processes
from kiq.runtime.ports import free_port
from kiq.security.tls import client_context
from kiq.settings import TlsSettings


@dataclass
class LocalNode:
    node_id: str
    bootstrap: str
    tables: list[str]
    data_dir: Path
    log_file: Path
    port: int = field(default_factory=free_port)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    tls: TlsSettings | None = None
    proc: subprocess.Popen[bytes] | None = None
    # Sent with ``metadata()`` to a node with authentication (a token with kiq:admin).
    authorization: str | None = None
    # Routes to mount (`--endpoint`). None: the shipped applications' beside ``tables``
    # given here (kiq's benchmarks and tests), and with no tables given, the routes of the
    # settings it is handed (`env`, as `kiq up` does), which then decide the tables too.
    endpoints: tuple[str, ...] | None = None
    # Processes answering its port (`--workers`): one, as several nodes share a machine here.
    workers: int = 1
    _ssl: ssl.SSLContext | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None and self.tls.enabled else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def get(self, path: str, timeout_s: float = 2.0) -> Response:
        """``GET path`` on this node, verified against the CA when it serves TLS, with
        ``authorization`` when set: its answer, whatever the status; an ``HttpError`` when
        none came."""
        if self.tls is not None and self.tls.enabled and self._ssl is None:
            self._ssl = client_context(self.tls.ca)
        auth = self.authorization
        headers = {"Authorization": auth} if auth is not None else None
        hint = f"is node {self.node_id} running? See {self.log_file}"
        verify = self._ssl if self._ssl is not None else True
        return get(
            f"{self.url}{path}", timeout_s=timeout_s, headers=headers, verify=verify, hint=hint
        )

    def start(self) -> LocalNode:
        if self.running:
            return self
        cmd = [sys.executable, "-m", "kiq", "serve", "--bootstrap", self.bootstrap]
        cmd += ["--node-id", self.node_id, "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--workers", str(self.workers)]
        cmd += self.extra_args
        if self.tls is not None:
            for flag, path in (("--tls-cert", self.tls.cert), ("--tls-key", self.tls.key)):
                if path is not None:
                    cmd += [flag, str(path.resolve())]
            if self.tls.ca is not None:
                cmd += ["--tls-ca", str(self.tls.ca.resolve())]
        for table in self.tables:
            cmd += ["--table", table]
        shipped = SHIPPED_ENDPOINTS if self.tables else ()
        for endpoint in self.endpoints if self.endpoints is not None else shipped:
            cmd += ["--endpoint", endpoint]
        self.proc = processes.spawn(cmd, log_file=self.log_file, env=self.env)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        reason = "no answer"
        while time.monotonic() < deadline:
            if not self.running:
                raise KiqError(f"node {self.node_id} exited; see {self.log_file}:\n{self.tail()}")
            try:
                resp = self.get("/v1/health/ready")
            except HttpError as exc:
                reason = exc.reason
            else:
                if resp.status_code == 200:
                    return
                reason = json.loads(resp.content or b"{}").get("reason", f"HTTP {resp.status_code}")
            time.sleep(0.2)
        raise KiqError(
            f"node {self.node_id} not ready after {timeout_s:.0f}s ({reason}); see {self.log_file}"
        )

    def kill(self) -> None:
        """SIGKILL: no goodbye to the group, no flush."""
        if self.proc is not None and self.running:
            processes.stop(self.proc, signal=signal.SIGKILL, grace_s=10)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is not None and self.running:
            processes.stop(self.proc, grace_s=timeout_s)

    def metadata(self) -> dict[str, Any]:
        """The node's ``GET /v1/metadata``, as JSON; a ``KiqError`` when it refuses."""
        resp = self.get("/v1/metadata", timeout_s=5)
        if not resp.is_success:
            raise KiqError(
                f"GET {self.url}/v1/metadata: HTTP {resp.status_code} from node {self.node_id}: "
                f"{resp.text[:200]}"
            )
        meta: dict[str, Any] = json.loads(resp.content)
        return meta

    def tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

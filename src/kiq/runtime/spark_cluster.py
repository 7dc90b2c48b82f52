"""A local Spark standalone cluster: one master and one worker, on loopback.

Both daemons come from the installed pyspark (its ``bin/spark-class``), so they
always match the driver's Spark version. Layout under ``data_dir``: ``master.pid``,
``worker.pid``, ``cluster.json`` (the host and ports the master was started on),
``logs/`` (each daemon's output) and ``work/`` (the worker's directory: one per
application, with each executor's stdout and stderr). ``start`` returns once the
master lists the worker as alive; executors run in JVMs of their own, as they would
on other machines.

The master is recognised by its port, so ``stop`` and ``status`` take the host and
ports from ``cluster.json`` (``started_layout``) unless told otherwise, and a pid
file whose Spark daemon still runs is never removed by a command that did not stop it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kiq.errors import SparkClusterError
from kiq.http_client import HttpError, get
from kiq.runtime import processes
from kiq.runtime.java import java_executable
from kiq.settings import SparkClusterSettings

log = logging.getLogger(__name__)

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
_LAYOUT = "cluster.json"


@dataclass(frozen=True)
class SparkClusterStatus:
    """What `kiq spark status` reports; ``ready`` means the master lists a live worker."""

    master_pid: int | None
    worker_pid: int | None
    ready: bool
    master_url: str
    ui_url: str
    cores: int
    log_dir: Path


def started_layout(data_dir: Path) -> dict[str, str | int]:
    """The ``host``, ``port`` and ``ui_port`` the master under ``data_dir`` was last started
    with, as settings' values ({}: never started there, or a record kiq cannot read)."""
    try:
        found = json.loads((data_dir.resolve() / _LAYOUT).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    layout: dict[str, str | int] = {}
    for key, kind in (("host", str), ("port", int), ("ui_port", int)):
        value = found.get(key)
        if type(value) is kind and isinstance(value, str | int):
            layout[key] = value
    return layout


def spark_home() -> Path:
    """The installed pyspark's directory, which holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class LocalSparkCluster:
    """Starts, stops and inspects the master and worker described by ``SparkClusterSettings``."""

    def __init__(self, settings: SparkClusterSettings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.log_dir = self.data_dir / "logs"
        self.work_dir = self.data_dir / "work"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @classmethod
    def on_free_ports(cls, root: Path, cores: int = 2, memory: str = "2g") -> LocalSparkCluster:
        """A cluster for tests: free loopback ports, everything under ``root``."""
        from kiq.runtime.ports import free_ports

        port, ui_port = free_ports(2)
        return cls(
            SparkClusterSettings(
                port=port, ui_port=ui_port, data_dir=root, worker_cores=cores, worker_memory=memory
            )
        )

    @property
    def master_url(self) -> str:
        return self.settings.master_url

    @property
    def ui_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.effective_ui_port}"

    def status(self) -> SparkClusterStatus:
        master, worker = self._running_pid("master"), self._running_pid("worker")
        cores = self._alive_cores() if master is not None else 0
        return SparkClusterStatus(
            master_pid=master,
            worker_pid=worker,
            ready=master is not None and worker is not None and cores > 0,
            master_url=self.master_url,
            ui_url=self.ui_url,
            cores=cores,
            log_dir=self.log_dir,
        )

    def start(self) -> SparkClusterStatus:
        """Start whichever daemon does not run; return once the worker has registered."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self._running_pid("master") is None:
            self._refuse_other("master", "start")
            self._check_ports_free()
            self._record_layout()
            self._launch(
                "master",
                _MASTER,
                ["--host", self.settings.host, "--port", str(self.settings.port)],
                ["--webui-port", str(self.settings.effective_ui_port)],
            )
        if self._running_pid("worker") is None:
            self._launch(
                "worker",
                _WORKER,
                ["--host", self.settings.host, "--cores", str(self.settings.worker_cores)],
                ["--memory", self.settings.worker_memory, "--work-dir", str(self.work_dir)],
                ["--webui-port", "0", self.master_url],
            )
        self._wait_ready()
        return self.status()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the worker (and so its executors), then the master; False if neither ran.

        A pid file goes once its daemon is stopped or gone; one whose Spark daemon runs
        but is not this cluster's (another port) stays, and is reported as an error.
        """
        stopped = False
        for role in ("worker", "master"):
            pid = self._running_pid(role)
            if pid is not None:
                target = processes.child_or_pid(pid, self._procs.get(role))
                if processes.stop(target, grace_s=timeout_s):
                    log.warning("spark %s pid=%d ignored SIGTERM; killed it", role, pid)
                log.info("spark %s stopped pid=%d", role, pid)
                stopped = True
            if self._other_daemon(role) is None:
                self._pid_file(role).unlink(missing_ok=True)
            self._procs.pop(role, None)
        self._refuse_other("master", "stop")
        return stopped

    # -- processes --------------------------------------------------------------

    def _pid_file(self, role: str) -> Path:
        return self.data_dir / f"{role}.pid"

    def _running_pid(self, role: str) -> int | None:
        pid = processes.read_pid(self._pid_file(role))
        if pid is None or not processes.alive(pid, self._procs.get(role)):
            return None
        main = _MASTER if role == "master" else _WORKER
        # spark-class execs the JVM, so the pid is the JVM's; its work dir or port makes it ours
        mine = str(self.work_dir) if role == "worker" else str(self.settings.port)
        return pid if processes.runs_with(pid, main, mine) else None

    def _other_daemon(self, role: str) -> int | None:
        """The pid file's pid if a Spark ``role`` daemon runs there that is not this one's
        (the master on another port: one started with other flags than these)."""
        pid = processes.read_pid(self._pid_file(role))
        if pid is None or not processes.alive(pid, self._procs.get(role)):
            return None
        if self._running_pid(role) == pid:
            return None
        return pid if processes.runs_with(pid, _MASTER if role == "master" else _WORKER) else None

    def _refuse_other(self, role: str, command: str) -> None:
        pid = self._other_daemon(role)
        if pid is None:
            return
        log.warning("spark %s pid=%d kept: not on %s", role, pid, self.master_url)
        raise SparkClusterError(
            f"the Spark {role} started from {self.data_dir} (pid {pid}) runs, but not as "
            f"{self.master_url}; kiq spark {command} left it and its pid file alone. Run "
            f"`kiq spark stop --data-dir {self.data_dir}` without --port/--host (they are "
            f"read from {self.data_dir / _LAYOUT}), or the --port and --host it was started with"
        )

    def _record_layout(self) -> None:
        """Write what ``stop`` and ``status`` need to find the master without flags."""
        layout = {
            "host": self.settings.host,
            "port": self.settings.port,
            "ui_port": self.settings.effective_ui_port,
        }
        (self.data_dir / _LAYOUT).write_text(json.dumps(layout) + "\n")

    def _env(self) -> dict[str, str]:
        java = java_executable()
        return {
            **os.environ,
            "JAVA_HOME": str(java.parent.parent),
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": self.settings.host,
            "SPARK_DAEMON_MEMORY": self.settings.daemon_memory,
            "SPARK_LOG_DIR": str(self.log_dir),
            "SPARK_WORKER_DIR": str(self.work_dir),
        }

    def _launch(self, role: str, main: str, *args: list[str]) -> None:
        cmd = [str(spark_home() / "bin" / "spark-class"), main, *(a for part in args for a in part)]
        proc = processes.spawn(
            cmd, log_file=self.log_dir / f"{role}.out", env=self._env(), new_session=True
        )
        self._procs[role] = proc
        self._pid_file(role).write_text(f"{proc.pid}\n")
        log.info("spark %s starting pid=%d log=%s", role, proc.pid, self.log_dir / f"{role}.out")

    def _check_ports_free(self) -> None:
        for port, flag in (
            (self.settings.port, "--port"),
            (self.settings.effective_ui_port, "--ui-port"),
        ):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.settings.host, port))
                except OSError as exc:
                    raise SparkClusterError(
                        f"port {self.settings.host}:{port} is taken ({exc.strerror}): "
                        f"stop what holds it or choose another with {flag}"
                    ) from exc

    def _alive_cores(self) -> int:
        """Cores of the live workers, as the master's web UI reports them (0: no answer)."""
        try:
            resp = get(f"{self.ui_url}/json/", timeout_s=2)
            if not resp.is_success:
                return 0
            state = json.loads(resp.content)
        except (HttpError, ValueError):
            return 0
        return sum(
            int(w.get("cores", 0)) for w in state.get("workers", []) if w.get("state") == "ALIVE"
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            for role in ("master", "worker"):
                # alive, not yet ours: spark-class runs a launcher before it execs the JVM
                pid = processes.read_pid(self._pid_file(role))
                if pid is None or not processes.alive(pid, self._procs.get(role)):
                    self.stop()
                    raise SparkClusterError(
                        f"the Spark {role} exited during start-up; last lines of its log:\n"
                        f"{processes.log_tail([self.log_dir / f'{role}.out'])}"
                    )
            if self._alive_cores() > 0:
                return
            time.sleep(0.3)
        raise SparkClusterError(
            f"no worker registered with {self.master_url} after "
            f"{self.settings.start_timeout_s:.0f}s; see {self.log_dir}, or stop it with "
            "`kiq spark stop`"
        )

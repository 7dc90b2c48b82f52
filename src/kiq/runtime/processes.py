"""Local daemons by pid file: is it alive, is it ours, stop it.

The broker and the Spark standalone daemons are long-lived JVMs started in sessions
of their own; commands that did not start them find them again through pid files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def spawn_logged(
    cmd: list[str], log_file: Path, env: dict[str, str], new_session: bool = False
) -> subprocess.Popen[bytes]:
    """``cmd`` as a child writing stdout and stderr to ``log_file`` (appended), stdin closed,
    with this process's environment and ``env`` over it."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=new_session,
        )


def alive(pid: int, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not); ``proc`` when this process started it."""
    if proc is not None and proc.pid == pid:
        return proc.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def runs_with(pid: int, *needles: str) -> bool:
    """Whether ``pid``'s command line holds every needle (a recycled pid does not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # cannot tell (no /proc): trust the pid file
    return all(n.encode() in cmdline for n in needles)


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def terminate(pid: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM, then SIGKILL after ``timeout_s``; True when it had to be killed."""
    os.kill(pid, signal.SIGTERM)
    return wait_or_kill(pid, timeout_s, proc)


def wait_or_kill(pid: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Wait ``timeout_s`` for a process told to stop, then SIGKILL it; True when killed."""
    deadline = time.monotonic() + timeout_s
    while alive(pid, proc) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not alive(pid, proc):
        return False
    os.kill(pid, signal.SIGKILL)
    while alive(pid, proc):
        time.sleep(0.05)
    return True


def log_tail(paths: list[Path], lines: int = 30) -> str:
    chunks: list[str] = []
    for path in paths:
        if path.exists():
            chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
    return "\n".join(chunks[-lines:]) or "(no log output)"

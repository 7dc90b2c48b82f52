"""Every process kiq starts and stops, through one door: ``spawn`` and ``stop``.

``spawn`` starts a child: its stdin closed (or a pipe), its output appended to a log
file (or inherited, or dropped), this process's environment with an overlay, in a
session of its own when asked. The environment is always this process's with the overlay
laid over it, never a replacement: the run's mark (``KIQ_PROCESS_MARKS``,
``kiq.runtime.reaper``) passes on to every child, so whatever ends a run (a test
session, ``kiq up``'s watchdog) finds it, whatever session it moved to.

``stop`` tells a process to stop (SIGTERM by default), waits a grace, SIGKILLs what is
left and waits again; to the process alone or to its whole group (a child started in a
session of its own leads one). ``stop_all`` tells every one first, then waits for each
(a quorum of brokers shuts down together). ``send`` and ``wait_or_kill`` are its two
halves, for a caller that does something between them.

A target is a child started here (a ``Popen``, reaped as it ends) or a bare pid: the
broker and the Spark standalone daemons are long-lived JVMs that commands which did not
start them find again through pid files (``read_pid``, ``alive``, ``runs_with``).
``subprocess.run`` for a short command run to its end (``javac``, ``git``) is not a
process to stop and stays where it is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from signal import SIGKILL, SIGTERM, Signals
from typing import TypeAlias

# kiq.runtime.reaper.MARKS, named again: the reaper imports this module (to start its
# watchdog), not the other way round.
MARKS = "KIQ_PROCESS_MARKS"

# A child started here, or the pid of a daemon found through its pid file.
Target: TypeAlias = subprocess.Popen[bytes] | int


def spawn(
    argv: Sequence[str],
    *,
    log_file: Path | None = None,
    stdout: int | None = None,
    stdin: int = subprocess.DEVNULL,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    new_session: bool = False,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a child.

    ``log_file``: stdout and stderr appended there (its folder made); without one, stdout
    is ``stdout`` (None: this process's, or ``subprocess.DEVNULL``/``PIPE``) and stderr
    this process's. ``stdin``: closed (``DEVNULL``), or ``PIPE`` for a child that waits
    for its end of file (the reaper's watchdog). ``env``: laid over this process's
    environment; the run's marks stay in it even if ``env`` names others. ``cwd``: where
    it runs (None: here). ``new_session``: a session and process group of its own, so a
    Ctrl-C to ours misses it and ``stop(..., group=True)`` reaches what it starts.
    ``die_with_parent``: the kernel SIGTERMs it when this process ends, however it ends
    (Linux; a node's read workers). Raises ``OSError`` when it cannot start.
    """
    if log_file is not None and stdout is not None:
        raise ValueError("spawn: a log_file or a stdout, not both")
    merged = {**os.environ, **(env or {})}
    ours = os.environ.get(MARKS)
    if ours:
        theirs = merged[MARKS].split(",") if merged.get(MARKS) else []
        merged[MARKS] = ",".join([*theirs, *(m for m in ours.split(",") if m not in theirs)])
    preexec = _die_with_parent if die_with_parent else None
    if log_file is None:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=stdout,
            env=merged,
            cwd=cwd,
            start_new_session=new_session,
            preexec_fn=preexec,
        )
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=merged,
            cwd=cwd,
            start_new_session=new_session,
            preexec_fn=preexec,
        )


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when its parent ends, however it ends."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, SIGTERM)


def child_or_pid(pid: int, proc: subprocess.Popen[bytes] | None) -> Target:
    """``proc`` when it is ``pid`` (a child of this process, reaped as it ends), else ``pid``."""
    return proc if proc is not None and proc.pid == pid else pid


def stop(
    target: Target,
    *,
    signal: Signals = SIGTERM,
    grace_s: float,
    group: bool = False,
    sweep_group: bool = False,
    kill_wait_s: float = 10.0,
) -> bool:
    """``signal`` to ``target``, ``grace_s`` to end, then SIGKILL; True when it was killed.

    ``group``: the signal and the SIGKILL go to its process group (it leads one: started
    with ``new_session``), sent even if the leader is gone already, to what it left.
    ``sweep_group``: the signal to it alone (it stops what it started itself), the
    SIGKILL to its group, and once it is gone a SIGKILL to whatever of its group outlived
    it (a Spark driver's JVM). After a SIGKILL it waits ``kill_wait_s`` more and raises
    ``subprocess.TimeoutExpired`` if it still runs. Nothing happens to a target already
    gone (but the group, with ``group``).
    """
    send(target, signal, group=group)
    return wait_or_kill(
        target, grace_s, group=group, sweep_group=sweep_group, kill_wait_s=kill_wait_s
    )


def stop_all(
    targets: Sequence[Target],
    *,
    signal: Signals = SIGTERM,
    grace_s: float,
    group: bool = False,
    kill_wait_s: float = 10.0,
) -> list[bool]:
    """``stop`` for several at once: ``signal`` to every one first, then for each in turn
    ``grace_s`` to end and a SIGKILL; whether each was killed, in order."""
    for target in targets:
        send(target, signal, group=group)
    return [wait_or_kill(t, grace_s, group=group, kill_wait_s=kill_wait_s) for t in targets]


def send(target: Target, sig: Signals, *, group: bool = False) -> None:
    """``sig`` to ``target`` (its process group with ``group``); nothing to one gone."""
    pid = target if isinstance(target, int) else target.pid
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
    elif isinstance(target, int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)
    else:
        target.send_signal(sig)  # nothing once it has been reaped


def wait_or_kill(
    target: Target,
    grace_s: float,
    *,
    group: bool = False,
    sweep_group: bool = False,
    kill_wait_s: float = 10.0,
) -> bool:
    """Wait ``grace_s`` for a process told to stop, then SIGKILL it (as ``stop`` says for
    ``group`` and ``sweep_group``); True when it was killed."""
    killed = False
    if not _wait(target, grace_s):
        send(target, SIGKILL, group=group or sweep_group)
        killed = True
        if not _wait(target, kill_wait_s):
            raise subprocess.TimeoutExpired(str(_pid(target)), kill_wait_s)
    if sweep_group:
        send(_pid(target), SIGKILL, group=True)  # what it started and left behind
    return killed


def _pid(target: Target) -> int:
    return target if isinstance(target, int) else target.pid


def _wait(target: Target, timeout_s: float) -> bool:
    """Whether ``target`` is gone within ``timeout_s`` (a child is reaped)."""
    if not isinstance(target, int):
        try:
            target.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout_s
    while alive(target):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


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


def log_tail(paths: list[Path], lines: int = 30) -> str:
    chunks: list[str] = []
    for path in paths:
        if path.exists():
            chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
    return "\n".join(chunks[-lines:]) or "(no log output)"

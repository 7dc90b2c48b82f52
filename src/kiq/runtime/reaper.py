"""Ending every process a session started, however the session itself ends.

A session (a test run, say) adds a fresh mark to ``KIQ_PROCESS_MARKS`` in its own
environment before it starts anything. Every process it starts, and every process
those start, inherits the mark, whatever process group or session it moves to and
whoever becomes its parent when its own dies: so the mark, not the process tree,
says what is the session's. ``end_marked`` finds them by their environment in
``/proc`` and stops them: SIGTERM to all at once, SIGKILL to what outlives a grace.

A session that is itself SIGKILLed cannot do that: a ``Watchdog`` is a small process
that waits for its session's end (its stdin reaching end of file, which happens
however the session went) and then ends whatever still carries the mark.
``ending_together`` is all of that for a block of a command (``kiq bench``'s stack,
``kiq up``); inside it a SIGTERM may raise, so the block's own cleanup runs as after a
Ctrl-C.
Linux only: without ``/proc`` nothing carries a mark and nothing is ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, MutableMapping
from pathlib import Path
from types import FrameType

MARKS = "KIQ_PROCESS_MARKS"  # comma-separated: a session inside another adds its own


def add_mark(environ: MutableMapping[str, str] | None = None) -> str:
    """A fresh mark, added to ``environ`` (this process's environment by default)."""
    environ = os.environ if environ is None else environ
    mark = uuid.uuid4().hex
    environ[MARKS] = f"{environ[MARKS]},{mark}" if environ.get(MARKS) else mark
    return mark


def carrying(mark: str) -> list[int]:
    """The processes other than this one whose environment carries ``mark``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid != os.getpid() and _carries(pid, mark):
            found.append(pid)
    return found


def _carries(pid: int, mark: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False
    prefix = f"{MARKS}=".encode()
    for var in environ.split(b"\0"):
        if var.startswith(prefix):
            return mark.encode() in var[len(prefix) :].split(b",")
    return False


def end_marked(
    mark: str,
    grace_s: float = 10.0,
    spare: Iterable[int] = (),
    hurry: threading.Event | None = None,
) -> list[int]:
    """SIGTERM every process carrying ``mark`` but ``spare``, SIGKILL what still runs after
    ``grace_s`` (or once ``hurry`` is set); the pids found, in the order found."""
    spared = set(spare)
    pids = [pid for pid in carrying(mark) if pid not in spared]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    hurry = hurry or threading.Event()
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        if hurry.wait(0.1):
            break
    for pid in pids:
        if _alive(pid) and _carries(pid, mark):  # not a recycled pid
            _signal(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or not ours
        os.kill(pid, sig)


class Terminated(SystemExit):
    """SIGTERM, raised where the program is: cleanups run, and it exits 143 as killed by it."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(128 + signum)


@contextlib.contextmanager
def ending_together(grace_s: float = 10.0, terminate: bool = True) -> Iterator[str]:
    """Every process started inside the block, and every one those start, ends with it.

    However the block ends: with ``terminate``, a SIGTERM to this process raises
    ``Terminated`` inside it, so its own cleanup (``finally``, ``with``) runs (without,
    the caller handles its signals itself, as ``kiq up`` does); what is still marked when
    it is over, or once this process is gone (a SIGKILL included), the block's watchdog
    ends. Yields the mark; this process's environment carries it only inside the block.
    """
    before = os.environ.get(MARKS)
    mark = add_mark()
    watchdog = Watchdog(mark, grace_s)
    # Handlers can be set from the main thread only.
    ours = terminate and threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if ours else None
    if ours:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        yield mark
    finally:
        if previous is not None:  # None: not set from Python, nothing to put back
            signal.signal(signal.SIGTERM, previous)
        if before is None:
            os.environ.pop(MARKS, None)
        else:
            os.environ[MARKS] = before
        watchdog.close(grace_s + 5)


class Watchdog:
    """A process of its own that ends what carries ``mark`` once ``close`` is called or this
    process is gone, whichever comes first. Its own session: a Ctrl-C to ours misses it."""

    def __init__(self, mark: str, grace_s: float = 10.0) -> None:
        # Here, not at the top: run as the watchdog this module imports nothing of kiq.
        from kiq.runtime import processes

        # By its path, isolated: it imports nothing of kiq, so nothing there can stop it.
        # It carries the mark, as everything the session starts does; ``end_marked`` never
        # ends the process that calls it, and a session ending its own mark spares it.
        self.proc = processes.spawn(
            [sys.executable, "-I", __file__, mark, str(grace_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self, timeout_s: float = 15.0) -> None:
        """Let it end what is left and exit; kill it if that takes over ``timeout_s``."""
        from kiq.runtime import processes

        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        processes.wait_or_kill(self.proc, timeout_s)


def main(argv: list[str]) -> None:
    """The watchdog: wait for end of file on stdin, then end what carries the mark."""
    mark, grace_s = argv[0], float(argv[1])
    session = os.getppid()  # spared, should its environment ever show the mark it added
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stray Ctrl-C must not cut the watch
    while sys.stdin.buffer.read(4096):
        pass
    end_marked(mark, grace_s, spare=[session])


if __name__ == "__main__":
    main(sys.argv[1:])

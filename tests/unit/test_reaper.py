"""kiq.runtime.reaper: what carries a mark is ended, whatever its group; nothing else is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kiq.runtime.processes import alive
from kiq.runtime.reaper import MARKS, Watchdog, add_mark, carrying, end_marked, ending_together

# A child that ignores SIGTERM and says so once it does, so a test knows when to signal it.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(60)"
)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def sleeper(env: dict[str, str], procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A process in a session of its own (as the broker is), with ``env``."""
    proc = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    procs.append(proc)
    return proc


def test_marks_nest_and_each_is_found_alone(started: list[subprocess.Popen[bytes]]):
    outer: dict[str, str] = {}
    first = add_mark(outer)
    inner = dict(outer)
    second = add_mark(inner)
    assert inner[MARKS] == f"{first},{second}"
    a = sleeper({**os.environ, **outer}, started)
    b = sleeper({**os.environ, **inner}, started)
    unmarked = sleeper({k: v for k, v in os.environ.items() if k != MARKS}, started)
    assert set(carrying(first)) == {a.pid, b.pid}
    assert carrying(second) == [b.pid]
    assert unmarked.pid not in carrying(first) + carrying(second)


def test_end_marked_ends_what_carries_the_mark_and_spares_the_rest(
    started: list[subprocess.Popen[bytes]],
):
    env = dict(os.environ)
    mark = add_mark(env)
    marked = sleeper(env, started)
    spared = sleeper(env, started)
    other = sleeper({**os.environ, MARKS: "someone-else"}, started)
    assert set(end_marked(mark, grace_s=5, spare=[spared.pid])) == {marked.pid}
    marked.wait(10)
    assert marked.returncode == -15  # SIGTERM was enough
    assert spared.poll() is None and other.poll() is None


def test_what_outlives_the_grace_is_killed(started: list[subprocess.Popen[bytes]]):
    env = dict(os.environ)
    mark = add_mark(env)
    stubborn = subprocess.Popen(
        [sys.executable, "-c", STUBBORN], env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    started.append(stubborn)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"1\n"
    took = time.monotonic()
    end_marked(mark, grace_s=0.5)
    stubborn.wait(10)
    assert stubborn.returncode == -9 and time.monotonic() - took < 5


def test_the_watchdog_ends_them_when_its_session_is_gone(started: list[subprocess.Popen[bytes]]):
    env = dict(os.environ)
    mark = add_mark(env)
    marked = sleeper(env, started)
    watchdog = Watchdog(mark, grace_s=5)
    time.sleep(0.5)
    assert marked.poll() is None, "it waits for its session's end"
    watchdog.close()  # as when the session dies: its end of the pipe closes
    marked.wait(10)
    assert watchdog.proc.returncode == 0


# A command's block as ``kiq bench`` runs its stack: a child in a session of its own (as the
# broker is), its pid printed, then a wait; its ``finally`` says so when it runs.
BLOCK = """
import subprocess, time
from kiq.runtime.reaper import ending_together
with ending_together(grace_s=2):
    child = subprocess.Popen(["sleep", "60"], start_new_session=True, stdout=subprocess.DEVNULL)
    print(child.pid, flush=True)
    try:
        time.sleep(60)
    finally:
        print("cleaned up", flush=True)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_what_a_block_started_ends_with_it_however_it_ends(
    started: list[subprocess.Popen[bytes]], signum: int, code: int
):
    """SIGTERM: the block's own cleanup runs and it exits 143; SIGKILL: its watchdog ends
    the child. Either way the child, in a session of its own, does not outlive the run."""
    block = subprocess.Popen(
        [sys.executable, "-c", BLOCK], stdout=subprocess.PIPE, start_new_session=True
    )
    started.append(block)
    assert block.stdout is not None
    child = int(block.stdout.readline())
    time.sleep(0.3)  # inside the block's sleep
    assert alive(child)
    block.send_signal(signum)
    assert block.wait(15) == code
    rest = block.stdout.read()
    assert (b"cleaned up" in rest) is (signum == signal.SIGTERM)
    assert _gone(child, 10), "the child outlived its run"


def test_a_block_leaves_the_environment_and_sigterm_as_they_were():
    before_env, before_handler = os.environ.get(MARKS), signal.getsignal(signal.SIGTERM)
    with ending_together(grace_s=1) as mark:
        assert mark in os.environ[MARKS].split(",")
        assert signal.getsignal(signal.SIGTERM) is not before_handler
    assert os.environ.get(MARKS) == before_env
    assert signal.getsignal(signal.SIGTERM) is before_handler

"""kiq.runtime.processes: ``spawn`` and ``stop`` on real, cheap children (``sleep``, a
Python that ignores SIGTERM); no mocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.runtime import processes, reaper
from kiq.runtime.reaper import MARKS

# Ignores SIGTERM, says so once it does (so the test knows when to signal it), then sleeps;
# with an argument it first starts a grandchild in its group and prints its pid.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if len(sys.argv) > 1:
    print(subprocess.Popen(["sleep", "60"]).pid, flush=True)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _stubborn(started: list[subprocess.Popen[bytes]], *args: str) -> subprocess.Popen[bytes]:
    proc = processes.spawn(
        [sys.executable, "-c", STUBBORN, *args], stdout=subprocess.PIPE, new_session=True
    )
    started.append(proc)
    return proc


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while processes.alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_child_that_stops_in_its_grace_is_not_killed(started: list[subprocess.Popen[bytes]]):
    proc = processes.spawn(["sleep", "60"])
    started.append(proc)
    took = time.monotonic()
    assert processes.stop(proc, grace_s=5) is False
    assert proc.returncode == -signal.SIGTERM and time.monotonic() - took < 4


def test_one_that_ignores_sigterm_is_killed_after_the_grace(
    started: list[subprocess.Popen[bytes]],
):
    proc = _stubborn(started)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    took = time.monotonic()
    assert processes.stop(proc, grace_s=0.5) is True
    assert proc.returncode == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - took < 5


def test_a_bare_pid_is_stopped_the_same_way(started: list[subprocess.Popen[bytes]]):
    """A daemon found by its pid file: not reaped here, seen gone once a zombie."""
    proc = _stubborn(started)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    assert processes.stop(processes.child_or_pid(proc.pid, None), grace_s=0.3) is True
    assert proc.wait(5) == -signal.SIGKILL
    assert processes.child_or_pid(proc.pid, proc) is proc


def test_a_child_already_gone_is_left_alone():
    proc = processes.spawn(["true"])
    proc.wait(5)
    assert processes.stop(proc, grace_s=0.1) is False
    assert processes.stop(proc.pid, grace_s=0.1) is False


def test_sweep_group_signals_the_leader_alone_then_kills_what_it_left(
    started: list[subprocess.Popen[bytes]],
):
    """As a Spark driver is stopped: SIGTERM to it alone, its group SIGKILLed once it is gone."""
    leader = processes.spawn(
        [sys.executable, "-c", "import subprocess, time; "
         "print(subprocess.Popen(['sleep', '60']).pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        new_session=True,
    )  # fmt: skip
    started.append(leader)
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    assert processes.stop(leader, grace_s=5, sweep_group=True) is False
    assert leader.returncode == -signal.SIGTERM
    assert _gone(grandchild), "the group outlived its leader"


def test_group_signals_and_kills_the_whole_group(started: list[subprocess.Popen[bytes]]):
    leader = _stubborn(started, "with-a-child")
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    assert leader.stdout.readline() == b"ready\n"
    assert processes.stop(leader, grace_s=0.3, group=True) is True
    assert leader.returncode == -signal.SIGKILL
    assert _gone(grandchild)  # the sleep took the SIGTERM sent to the group


def test_stop_all_tells_every_one_first(started: list[subprocess.Popen[bytes]]):
    sleepers = [processes.spawn(["sleep", "60"]) for _ in range(3)]
    stubborn = _stubborn(started)
    started.extend(sleepers)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    took = time.monotonic()
    assert processes.stop_all([stubborn, *sleepers], grace_s=0.5) == [True, False, False, False]
    assert [p.returncode for p in sleepers] == [-signal.SIGTERM] * 3
    assert time.monotonic() - took < 4


def test_spawn_logs_appends_and_lays_env_over_ours(tmp_path: Path):
    log_file = tmp_path / "deep" / "child.log"
    log_file.parent.mkdir()
    log_file.write_text("before\n")
    script = "import os, sys; print(os.environ['KIQ_TEST_X']); print('err', file=sys.stderr)"
    proc = processes.spawn(
        [sys.executable, "-c", script], log_file=log_file, env={"KIQ_TEST_X": "over"}
    )
    assert proc.wait(10) == 0
    assert log_file.read_text().split() == ["before", "over", "err"]


def test_spawn_runs_in_cwd_with_stdin_closed_and_a_session_of_its_own(tmp_path: Path):
    script = (
        "import os, sys; print(os.getcwd(), sys.stdin.read() == '', os.getsid(0) == os.getpid())"
    )
    proc = processes.spawn(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=tmp_path, new_session=True
    )
    out, _ = proc.communicate(timeout=10)
    assert out.decode().split() == [str(tmp_path), "True", "True"]


def test_every_child_carries_the_runs_marks(monkeypatch: pytest.MonkeyPatch):
    """Even when the overlay names other marks: the reaper must find what a run started."""
    assert processes.MARKS == reaper.MARKS
    monkeypatch.setenv(MARKS, "run-a,run-b")
    script = f"import os; print(os.environ['{MARKS}'])"
    for overlay, expected in (
        (None, "run-a,run-b"),
        ({MARKS: "run-a,run-b,inner"}, "run-a,run-b,inner"),
        ({MARKS: "elsewhere"}, "elsewhere,run-a,run-b"),
    ):
        proc = processes.spawn([sys.executable, "-c", script], stdout=subprocess.PIPE, env=overlay)
        out, _ = proc.communicate(timeout=10)
        assert out.decode().strip() == expected


def test_a_child_that_dies_with_its_parent(tmp_path: Path):
    """``die_with_parent``: the kernel SIGTERMs the child once the process that spawned it
    is gone (a node's read workers)."""
    script = (
        "import sys; from kiq.runtime import processes; "
        "p = processes.spawn(['sleep', '60'], die_with_parent=True); print(p.pid, flush=True)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, timeout=30, check=True
    )
    assert _gone(int(parent.stdout))


def test_a_log_file_and_a_stdout_are_one_too_many(tmp_path: Path):
    with pytest.raises(ValueError, match="not both"):
        processes.spawn(["true"], log_file=tmp_path / "x.log", stdout=subprocess.PIPE)

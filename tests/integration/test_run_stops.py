"""The test run stops when asked: a SIGTERM, a Ctrl-C or a SIGKILL to pytest mid-run leaves
no broker, Spark or node process behind, and no further test runs.

Each case is a small pytest session of its own on the suite's real fixtures (its session
broker, Spark, a `kiq serve` node) whose first test holds them up and sleeps. The
sessions start as a shell starts a job in the background, SIGINT ignored, as `make test`
run from a script is; each is signalled once everything is up. Every process a session
starts carries a mark of this test's (``kiq.runtime.reaper``), so "none left" means
none, whatever process group it was in or whoever became its parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kiq.runtime.processes import alive
from kiq.runtime.reaper import add_mark, carrying, end_marked

REPO = Path(__file__).parents[2]

HELD = """
import time

from kiq.runtime.nodes import LocalNode


def test_hold({fixtures}, make_topic, tmp_path):
    node = LocalNode("n1", broker.bootstrap, [f"t={{make_topic('held')}}"], tmp_path / "n1",
                     tmp_path / "n1.log")
    node.start().wait_ready()
    pids = [n.proc.pid for n in broker.nodes if n.proc is not None] + [node.proc.pid]
    print("UP", *pids, flush=True)
    time.sleep(600)


def test_after():
    print("REACHED", flush=True)
"""


def _ignore_sigint() -> None:
    """As a shell starts a background job: Ctrl-C is pytest's to take back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class Run:
    """One pytest session of the suite's fixtures, its output, and what it started."""

    name: str
    sig: signal.Signals  # what it is sent once its fixtures are up
    root: Path
    spark: bool = False
    mark: str = ""

    @property
    def out(self) -> Path:
        return self.root / "out.txt"

    def start(self) -> subprocess.Popen[bytes]:
        self.root.mkdir()
        test = self.root / "test_held.py"
        test.write_text(HELD.format(fixtures="broker, spark" if self.spark else "broker"))
        env = dict(os.environ)
        env.pop("PYTEST_ADDOPTS", None)  # the run's own options are not this session's
        self.mark = add_mark(env)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        cmd += ["-p", "tests.integration.conftest", "-q", "-s"]
        cmd += [f"--basetemp={self.root / 'tmp'}", str(test)]
        with self.out.open("wb") as out:
            return subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a job of its own
                preexec_fn=_ignore_sigint,
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def up(self, proc: subprocess.Popen[bytes]) -> list[int] | None:
        """The broker's and the node's pids once the held test printed them."""
        for line in self.output().splitlines():
            if line.startswith("UP "):
                return [int(p) for p in line.split()[1:]]
        if proc.poll() is not None:
            raise AssertionError(f"{self.name}: exited before it was up:\n{self.output()}")
        return None

    def send(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGINT to the whole group, as a Ctrl-C in a terminal; others to pytest alone."""
        if self.sig is signal.SIGINT:
            os.killpg(proc.pid, self.sig)
        else:
            proc.send_signal(self.sig)

    def left(self) -> list[str]:
        """What still carries the mark: pid and command line."""
        return [f"{pid} {_cmdline(pid)[:160]}" for pid in carrying(self.mark)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"


def test_a_signalled_run_stops_and_leaves_no_process(tmp_path: Path):
    runs = [
        Run("SIGTERM", signal.SIGTERM, tmp_path / "term", spark=True),
        Run("Ctrl-C", signal.SIGINT, tmp_path / "int", spark=True),
        Run("SIGKILL", signal.SIGKILL, tmp_path / "kill"),
    ]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for run in runs:  # side by side: a broker and Spark start slowly on two cores
            procs[run.name] = run.start()
        held: dict[str, list[int]] = {}
        deadline = time.monotonic() + 240
        while len(held) < len(runs):
            assert time.monotonic() < deadline, "\n".join(r.output()[-2000:] for r in runs)
            for run in runs:
                if run.name not in held and (up := run.up(procs[run.name])) is not None:
                    held[run.name] = up
                    run.send(procs[run.name])
            time.sleep(0.2)
        failures = [f for run in runs for f in _stopped(run, procs[run.name], held[run.name])]
        assert not failures, "\n".join(failures)
    finally:
        for run in runs:
            if run.name in procs and procs[run.name].poll() is None:
                os.killpg(procs[run.name].pid, signal.SIGKILL)
                procs[run.name].wait()
            if run.mark:
                end_marked(run.mark, grace_s=5)


def _stopped(run: Run, proc: subprocess.Popen[bytes], held: list[int]) -> list[str]:
    """What went wrong after ``run`` was signalled: nothing, when it stopped and left nothing."""
    try:
        proc.wait(90)  # the session's teardown: Spark and the broker stop
    except subprocess.TimeoutExpired:
        return [f"{run.name}: pytest still runs:\n{run.output()[-3000:]}"]
    deadline = time.monotonic() + 30  # a SIGKILLed run: its watchdog's grace
    while (left := run.left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    failures = [f"{run.name}: left running: {left}"] if left else []
    if still := [pid for pid in held if alive(pid)]:
        failures.append(f"{run.name}: the broker or node it held still runs: {still}")
    expected = -signal.SIGKILL if run.sig is signal.SIGKILL else 2  # pytest: interrupted
    if proc.returncode != expected:
        failures.append(f"{run.name}: exit {proc.returncode}:\n{run.output()[-3000:]}")
    if "REACHED" in run.output():
        failures.append(f"{run.name}: the run went on to the next test")
    return failures

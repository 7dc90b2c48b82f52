"""The local stack: its processes laid out under one home, stopped in reverse of their start,
every one of them however stopping another went. Stand-ins record the order; a real child
stands in for a feed."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kiq.runtime.stack import LocalStack


class Recorded:
    """A broker, pipeline or node that writes its stop into ``log`` (and may fail it)."""

    def __init__(self, name: str, log: list[str], fails: bool = False, running: bool = False):
        self.name, self.log, self.fails, self.running = name, log, fails, running
        self.bootstrap = "127.0.0.1:9"

    def stop(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} would not stop")

    def start(self) -> None:
        self.log.append(f"start {self.name}")
        self.running = True

    def status(self) -> SimpleNamespace:
        return SimpleNamespace(running=self.running)


def stack_of(tmp_path: Path, log: list[str], **failing: bool) -> LocalStack:
    broker: Any = Recorded("broker", log, failing.get("broker", False))
    stack = LocalStack(tmp_path, broker)
    stack.pipelines += [Recorded("pipeline", log, failing.get("pipeline", False))]
    stack.nodes += [Recorded(n, log, failing.get(n, False)) for n in ("n1", "n2")]
    return stack


def test_stop_goes_nodes_then_pipelines_then_broker(tmp_path: Path):
    log: list[str] = []
    stack = stack_of(tmp_path, log)
    stack.start_broker()
    stack.stop()
    assert log == ["start broker", "n1", "n2", "pipeline", "broker"]


def test_one_that_fails_to_stop_leaves_none_running_and_its_error_is_raised(tmp_path: Path):
    log: list[str] = []
    stack = stack_of(tmp_path, log, n1=True, pipeline=True)
    with pytest.raises(RuntimeError, match="n1 would not stop"):  # the first one's
        stack.stop()
    assert log == ["n1", "n2", "pipeline", "broker"]


def test_a_broker_found_running_is_adopted_and_left_running(tmp_path: Path):
    log: list[str] = []
    stack = stack_of(tmp_path, log)
    assert stack.broker is not None
    stack.broker.running = True  # another run's
    stack.start_broker(adopt=True)
    stack.stop()
    assert stack.broker_was_running and log == ["start broker", "n1", "n2", "pipeline"]


def test_without_adopting_the_broker_is_stopped_even_if_it_ran_before(tmp_path: Path):
    log: list[str] = []
    stack = stack_of(tmp_path, log)
    assert stack.broker is not None
    stack.broker.running = True
    stack.start_broker()
    stack.stop()
    assert not stack.broker_was_running and log[-1] == "broker"


def test_the_block_stops_the_stack_when_it_raises(tmp_path: Path):
    log: list[str] = []
    home = tmp_path / "home"
    with pytest.raises(KeyError), stack_of(home, log) as stack:
        assert home.is_dir()  # made on the way in
        stack.start_broker()
        raise KeyError("a failed run")
    assert log == ["start broker", "n1", "n2", "pipeline", "broker"]


def test_every_process_lives_under_its_home(tmp_path: Path):
    stack = LocalStack(tmp_path, external_bootstrap="kafka:9092")
    pipeline = stack.pipeline(["stocks", "wordcount"], trigger="microbatch")
    node = stack.node("n1", ["t=t"], port=8080)
    disk = stack.node("n2", (), tmp_path / "disk")
    assert stack.pipelines == [pipeline] and stack.nodes == [node, disk]
    assert pipeline.targets == ("stocks", "wordcount") and pipeline.bootstrap == "kafka:9092"
    assert (pipeline.checkpoint_dir, pipeline.log_file, pipeline.trigger) == (
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        "microbatch",
    )
    assert (node.data_dir, node.log_file, node.port, node.tables) == (
        tmp_path / "n1",
        tmp_path / "n1.log",
        8080,
        ["t=t"],
    )
    assert (disk.data_dir, disk.log_file) == (tmp_path / "disk", tmp_path / "n2.log")
    assert not node.running and not pipeline.running  # registered, not started


def test_a_stack_needs_a_broker_or_a_bootstrap(tmp_path: Path):
    with pytest.raises(ValueError):
        _ = LocalStack(tmp_path).bootstrap


def test_feeds_log_under_home_and_stop_first(tmp_path: Path):
    log: list[str] = []
    stack = stack_of(tmp_path, log)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert stack.feed(sleeper) == tmp_path / "feed1.log"
    assert stack.feed(sleeper, env={"X": "1"}, cwd=tmp_path) == tmp_path / "feed2.log"
    feeds = list(stack.feeds)
    assert all(f.poll() is None for f in feeds)
    first = stack.nodes[0]
    first_stop = first.stop

    def stop_n1() -> None:  # what still ran when the first node was told to stop
        log.append(f"feeds running: {sum(f.poll() is None for f in feeds)}")
        first_stop()

    first.stop = stop_n1
    stack.stop()
    assert all(f.poll() is not None for f in feeds)
    assert log == ["feeds running: 0", "n1", "n2", "pipeline", "broker"]
    assert (tmp_path / "feed1.log").exists() and (tmp_path / "feed2.log").exists()

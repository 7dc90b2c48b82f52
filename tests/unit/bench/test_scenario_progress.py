"""Scenarios report their phases and figures as they go: driven here on stand-ins for the
broker, the nodes, the pipeline and the load, so no Kafka or Spark runs."""

from __future__ import annotations

import asyncio
import io
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from kiq.bench import restore, soak, stack
from kiq.bench.progress import Reporter
from kiq.bench.restore import RestoreConfig, run_restore
from kiq.bench.soak import SoakConfig, run_soak


class FakeBroker:
    bootstrap = "127.0.0.1:9"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def status(self) -> SimpleNamespace:
        return SimpleNamespace(pid=None)


class FakeNode:
    """A node that is this process: /proc has figures for it."""

    def __init__(self, node_id: str = "n1") -> None:
        self.node_id = node_id
        self.url = f"http://127.0.0.1:1/{node_id}"
        self.proc = SimpleNamespace(pid=os.getpid())
        self.running = True
        self.restarts = 0

    def wait_ready(self, timeout_s: float = 60) -> None:
        pass

    def stop(self) -> None:
        pass

    def start(self) -> FakeNode:
        self.restarts += 1
        return self


@pytest.fixture(autouse=True)
def fake_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real local_stack (its phases included) around a broker that is not there."""
    monkeypatch.setattr(stack.LocalBroker, "on_free_ports", lambda _path: FakeBroker())
    yield


def reporting() -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    return Reporter("test", Console(file=out, width=200)), out


def test_restore_reports_each_phase_and_its_figures(monkeypatch: pytest.MonkeyPatch):
    node = FakeNode()
    monkeypatch.setattr(restore, "load_quotes", lambda *_args: {0: 9})
    monkeypatch.setattr(restore, "start_nodes", lambda *_args: [node])
    monkeypatch.setattr(restore, "until_serving", lambda *_args: (0.25, 0.5))
    monkeypatch.setattr(restore, "restored_records", lambda *_args: (10, 0.4))
    monkeypatch.setattr(restore, "wait_applied", lambda *_args: None)
    show, out = reporting()

    result = run_restore(RestoreConfig(keys=10), progress=show)

    assert result["restore_records_per_s"] == 20.0  # the figures are the scenario's as before
    assert show.phases == [
        "starting the broker",
        "loading 10 keys",
        "restoring on a fresh node",
        "catching up",
        "restarting from its data dir",
        "stopping the stack",
    ]
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("test done in 0:00: node RSS ")
    assert "MB, fresh ready 0.5 s, records/s 20, peak RSS " in last
    assert last.endswith("MB, restart ready 0.5 s")
    assert node.restarts == 1


def test_soak_reports_its_restarts_and_running_figures(monkeypatch: pytest.MonkeyPatch):
    """The scenario of the issue: silent for 25 minutes before; now a line per phase, each
    restart one, the reads counted as they go."""
    nodes: list[FakeNode] = []

    def add_node(self: stack.Stack, node_id: str, tables: list[str]) -> FakeNode:
        nodes.append(FakeNode(node_id))
        return nodes[-1]

    class FakeProber:
        def __init__(self, *_args: object) -> None:
            self.samples: list[float] = []
            self.errors: list[str] = []

        async def warm_up(self, timeout_s: float) -> float:
            return 1.0

        async def measure(self, duration_s: float, every_s: float) -> None:
            self.samples.append(12.5)

    class FakeFeed:
        def __init__(self, *_args: object, **_kwargs: object) -> None:
            self.producer = SimpleNamespace(delivered=0)

        def stop(self) -> None:
            pass

    async def read(
        urls: object, symbols: object, cfg: object, reads: soak._Reads, stop: threading.Event
    ) -> None:
        while not stop.is_set():
            reads.sent += 1
            await asyncio.sleep(0.005)

    monkeypatch.setattr(stack.Stack, "create_stock_topics", lambda self, partitions: None)
    monkeypatch.setattr(stack.Stack, "add_stock_pipeline", lambda self, *_args: object())
    monkeypatch.setattr(stack.Stack, "add_node", add_node)
    monkeypatch.setattr(soak, "Prober", FakeProber)
    monkeypatch.setattr(soak, "TickFeed", FakeFeed)
    monkeypatch.setattr(soak, "_read", read)
    monkeypatch.setattr(soak, "_DRAIN_S", 0.0)
    show, out = reporting()
    cfg = SoakConfig(duration_s=0.6, restart_every_s=0.2, rate=100, sample_every_s=0.1)

    result = run_soak(cfg, progress=show)

    assert show.phases[:6] == [
        "starting the broker",
        "starting the pipeline",
        "starting n1, n2, n3",
        "waiting for a first probe (Spark starting)",
        "feeding before reads count",
        "measuring",
    ]
    assert show.phases[-2:] == ["draining the readers and the feed", "stopping the stack"]
    during = show.phases[6:-2]
    restarted = [p for p in during if p.startswith("restart")]
    assert set(during) <= {"measuring", "restart n2", "restart n3"}
    assert restarted[:2] == ["restart n2", "restart n3"]  # n1 never: the plainest leak view
    assert len(restarted) == len(result["restarts"])  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert any("restart n2 (0:00 / 0:00): reads " in line for line in lines)
    assert re.match(rf"test done in 0:0\d: reads {result['reads']:,} \(\d+/s\), ", lines[-1])
    assert "read errors 0, probes 1, probe errors 0, ticks 0" in lines[-1]
    assert "n1 RSS " in lines[-1] and "restarts " in lines[-1]


def test_a_scenario_writes_nothing_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    monkeypatch.setattr(restore, "load_quotes", lambda *_args: {0: 9})
    monkeypatch.setattr(restore, "start_nodes", lambda *_args: [FakeNode()])
    monkeypatch.setattr(restore, "until_serving", lambda *_args: (0.25, 0.5))
    monkeypatch.setattr(restore, "restored_records", lambda *_args: (10, 0.4))
    monkeypatch.setattr(restore, "wait_applied", lambda *_args: None)
    run_restore(RestoreConfig(keys=10))  # its default reporter: stderr
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "restore 0:00 loading 10 keys" in captured.err

"""Every bench's figures carry the machine's load over the run."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from kiq.bench import stats


def test_the_load_at_start_its_mean_and_highest(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = itertools.chain([2.0, 6.0, 4.0], itertools.repeat(4.0))
    monkeypatch.setattr(stats.os, "getloadavg", lambda: (next(readings), 0.0, 0.0))
    with stats.machine_load(every_s=0.01) as load:
        assert load == {}  # filled in when the run ends
        time.sleep(0.1)
    assert load["load_average_at_start"] == 2.0
    assert load["load_average_max"] == 6.0
    assert 2.0 < load["load_average_mean"] < 6.0


def test_a_scenarios_json_holds_the_load(tmp_path: Path) -> None:
    from kiq.cli.bench import _measure

    out = tmp_path / "figures.json"
    _measure("demo", "nothing", lambda: {"throughput_rps": 1.0}, out)
    figures = json.loads(out.read_text())
    assert figures["throughput_rps"] == 1.0
    assert {"load_average_at_start", "load_average_mean", "load_average_max"} <= figures.keys()

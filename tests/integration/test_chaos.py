"""Node failures under readers going through the other nodes: short runs of ``kiq bench chaos``.

What kiq promises in each: no read through a node left standing fails, and no
write made during the fault is lost. A stopped node (SIGSTOP) must not make
reads slow: hedged forwarding answers from another replica within the hedge cap
(100 ms); the bench's goal is 250 ms for the worst read, 500 ms here for the
noise of a shared test machine. Each test starts its own broker and nodes: about
25-35 s each on the project machine.
"""

from __future__ import annotations

import pytest

from kiq.bench.chaos_nodes import NodeChaosConfig, run_node_chaos

pytestmark = pytest.mark.integration


def run(scenario: str, fault_s: float = 4.0) -> dict[str, object]:
    cfg = NodeChaosConfig(scenario, fault_s=fault_s, keys=500, rate=400, before_s=2, after_s=1)
    result = run_node_chaos(cfg)
    assert result["failed_reads"] == 0, result["failures_sample"]
    assert result["records_lost"] == 0
    assert int(str(result["reads"])) > 1_000  # the readers really ran through the fault
    return result


def test_a_stopped_node_slows_no_read() -> None:
    # Stopped past the session timeout (6 s): the group also moves its partitions away.
    result = run("sigstop", fault_s=8)
    assert float(str(result["worst_read_ms"])) <= 500, result
    hedging = result["hedging"]
    assert isinstance(hedging, dict) and hedging["peers_avoided"] >= 1


def test_a_killed_node_fails_no_read_and_rejoins() -> None:
    result = run("kill")
    assert float(str(result["rejoin_s"])) < 60


def test_a_rolling_restart_fails_no_read() -> None:
    run("rolling-restart")


def test_a_node_added_then_removed_fails_no_read() -> None:
    run("add-remove")

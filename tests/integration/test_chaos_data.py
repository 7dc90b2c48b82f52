"""Failures of the data under readers: the short runs of ``kiq bench chaos`` data scenarios.

Each starts its own broker and nodes (src/kiq/bench/chaos_data.py says what each
does). What kiq promises: a full disk turns the table not-ready and loses
nothing; 1 MiB values are served intact; a recreated topic replaces the table
(reads of a partition being rebuilt answer 503, or 404 while the new log lacks
the key; never the deleted data).
"""

from __future__ import annotations

import os

import pytest

from kiq.bench.chaos_data import DataChaosConfig, run_data_chaos

pytestmark = pytest.mark.integration


def run(scenario: str, min_reads: int = 200) -> dict[str, object]:
    result = run_data_chaos(DataChaosConfig(scenario, rate=100, within_s=120))
    assert result["records_lost"] == 0, result
    assert int(str(result["reads"])) >= min_reads, result  # the readers ran through the fault
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs: needs root")
def test_a_full_disk_loses_nothing_and_recovers() -> None:
    result = run("disk-full")
    assert result["failed_reads"] == 0, result["failures_sample"]
    assert result["not_ready_after_s"] is not None, "the node never said a store refused a write"
    assert result["recovery_s"] is not None, "the node never caught up once space returned"
    assert result["restarted_and_intact"] is True
    assert result["node_died"] is False


def test_one_mib_values_round_trip() -> None:
    result = run("large-values", min_reads=30)  # 1 MiB each, a tenth of the rate
    assert result["failed_reads"] == 0, result["failures_sample"]
    assert int(str(result["value_bytes"])) >= 1024 * 1024
    assert result["multiget_and_range_intact"] is True
    assert result["nodes_died"] == []


def test_a_recreated_topic_replaces_the_table() -> None:
    result = run("topic-recreated")
    assert result["old_records_still_served"] == 0
    assert result["recovery_s"] is not None
    assert result["nodes_died"] == []
    failures = result["failures_sample"]
    assert isinstance(failures, list)
    # While a partition is rebuilt: unavailable, or not found while the new log lacks the key.
    assert all(status in (503, 404) for _, status, _ in failures), failures

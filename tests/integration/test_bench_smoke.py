"""`kiq bench` scenarios at tiny sizes: they run end to end, and their JSON has every figure.

Not the targets: a smoke run only shows the harness measures and counts what it
should (errors included), each scenario on a stack of its own.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from kiq.bench.failover import FailoverConfig, run_failover
from kiq.bench.lookups import LookupsConfig, run_lookups
from kiq.bench.restore import RestoreConfig, run_restore
from kiq.bench.wrk import parse

pytestmark = pytest.mark.integration

WRK_OUTPUT = """\
Running 2s test @ http://127.0.0.1:4000/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   412.50us  120.00us   3.10ms   90.00%
    Req/Sec     9.10k   300.00     9.50k    70.00%
  Latency Distribution
     50%  380.00us
     75%  450.00us
     90%  600.00us
     99%    1.20ms
  18200 requests in 2.00s, 4.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 17
Requests/sec:   9100.00
Transfer/sec:      2.00MB
kiq-p999-us 2950
kiq-redirects 0
"""


def assert_figures(result: dict, fields: list[str]) -> None:
    assert set(fields) <= set(result), set(fields) - set(result)
    for name in fields:
        value = result[name]
        assert isinstance(value, int | float) and not isinstance(value, bool), (name, value)
        assert math.isfinite(value), (name, value)
    json.dumps(result, allow_nan=False)  # strict JSON: no NaN or Infinity


def test_wrk_output_is_parsed():
    r = parse(WRK_OUTPUT)
    assert (r.requests, r.rps, r.non_2xx, r.socket_errors, r.errors) == (18200, 9100.0, 17, 3, 20)
    assert (r.p50_ms, r.p75_ms, r.p90_ms, r.p99_ms, r.p999_ms) == (0.38, 0.45, 0.6, 1.2, 2.95)


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed: `make deps`")
def test_lookups_counts_throughput_latency_and_missing_keys():
    cfg = LookupsConfig(
        nodes=1, keys=500, connections=4, duration_s=2, mode="local", warmup_s=0, missing_keys=50
    )
    result = run_lookups(cfg)
    assert_figures(
        result,
        [
            "nodes",
            "keys",
            "connections",
            "duration_s",
            "throughput_rps",
            "floor_rps",
            "ratio",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "p999_ms",
            "errors",
            "requests",
        ],
    )
    assert result["scenario"] == "lookups" and result["mode"] == "local"
    for name in ("throughput_rps", "floor_rps", "ratio", "p50_ms", "p99_ms", "p999_ms"):
        assert result[name] > 0, name
    assert result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"]
    # One key in eleven was never produced: each such request is a 404, counted as an error.
    assert 0 < result["non_2xx"] < result["requests"]
    assert result["errors"] >= result["non_2xx"] and result["floor_errors"] > 0
    # Both servers did work during their runs: CPU per request is measured, not assumed.
    assert result["cpu_us_per_request"] > 0 and result["floor_cpu_us_per_request"] > 0
    # wrk's own CPU, the floor answering with kiq's headers, and what the cores allow
    assert result["load_cpu_us_per_request"] > 0 and result["cores_bound_rps"] > 0
    assert result["floor_kiq_headers_rps"] > 0
    assert result["floor_kiq_headers_cpu_us_per_request"] > 0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed: `make deps`")
def test_lookups_in_random_mode_measure_forwarding_against_local_lookups():
    cfg = LookupsConfig(nodes=2, keys=300, connections=4, duration_s=2, mode="random", warmup_s=0)
    result = run_lookups(cfg)
    assert_figures(
        result,
        [
            "throughput_rps",
            "local_rps",
            "vs_local",
            "local_cpu_us_per_request",
            "forwarded_cost_vs_local",
            "errors",
        ],
    )
    assert result["wrk_threads"] == 2 and result["errors"] == 0
    assert result["throughput_rps"] > 0 and result["local_rps"] > 0 and result["vs_local"] > 0
    assert result["forwarded_cost_vs_local"] > 0
    # every node answering keys it owns, wrk spread over them as in the random run
    assert result["spread_local_rps"] > 0 and result["spread_local_errors"] == 0
    assert result["forwarded_cost_vs_spread_local"] > 0
    # n1 forwarding every lookup to n2: the asker works for it, and so does the owner
    assert result["forward_only_errors"] == 0 and result["forward_only_rps"] > 0
    assert result["forward_only_asker_cpu_us_per_request"] > 0
    assert result["forward_only_owner_cpu_us_per_request"] > 0
    assert result["forward_only_cost_vs_local"] > 0


def test_restore_times_a_fresh_start_and_a_restart():
    result = run_restore(RestoreConfig(keys=2_000))
    assert_figures(
        result,
        [
            "keys",
            "fresh_ready_s",
            "restore_records_per_s",
            "restart_ready_s",
            "restart_restored_records",
            "fresh_restored_records",
            "materialize_records_per_s",
        ],
    )
    assert result["fresh_ready_s"] > 0 and result["restart_ready_s"] > 0
    assert result["restore_records_per_s"] > 0
    assert result["materialize_records_per_s"] > 0
    assert result["fresh_restored_records"] > 0
    assert result["restart_restored_records"] < result["keys"]  # reopened, not re-read


def test_failover_counts_requests_and_times_the_recovery():
    cfg = FailoverConfig(keys=500, rate=200, before_s=2, after_s=7, session_timeout_ms=3000)
    result = run_failover(cfg)
    assert_figures(
        result,
        [
            "requests",
            "failed_requests",
            "seconds_until_all_answered",
            "seconds_until_not_stale",
            "victim_partitions",
            "partitions_never_answered",
            "stale_answers",
        ],
    )
    assert result["requests"] > 0.8 * 200 * 9
    assert result["victim_partitions"] > 0 and result["partitions_never_answered"] == 0
    assert 0 < result["seconds_until_all_answered"] < 7
    # Standbys answered (stale) until the group rebalanced, well within the window.
    assert result["stale_answers"] > 0 and result["stale_at_end"] is False
    assert 0 < result["seconds_until_not_stale"] < 7
    assert 0 <= result["failed_requests"] < result["requests"]
    assert result["failed_requests"] == (
        result["failed_in_flight_to_victim"] + result["failed_via_survivors"]
    )


@pytest.mark.spark
@pytest.mark.slow  # Spark's start and first batches take a minute or more on two cores
def test_ingest_reports_each_rate_step():
    from kiq.bench.ingest import IngestConfig, run_ingest

    cfg = IngestConfig(
        rates=(200,), step_s=4, warmup_s=1, settle_max_s=10, symbols=20, partitions=4
    )
    result = run_ingest(cfg)
    assert_figures(result, ["max_rate_held", "max_rate_held_achieved", "step_s", "settle_s"])
    assert result["max_rate_held"] in (0.0, 200)
    (step,) = result["steps"]
    assert_figures(step, ["rate_target", "rate_achieved", "probes", "probe_errors", "p99_ms"])
    assert step["rate_target"] == 200 and step["rate_achieved"] > 0
    # Every probe sent was judged: visible (a sample) or not within the give-up time (an error).
    assert step["probes"] + step["probe_errors"] > 0
    assert step["held"] == (result["max_rate_held"] == 200)


@pytest.mark.spark
@pytest.mark.slow
def test_freshness_measures_probes_in_real_time_mode():
    """Real-Time Mode here: the micro-batch path is the ingest smoke test's and the pipeline
    tests'. One partition: the real-time task holds one of local Spark's two cores."""
    from kiq.bench.freshness import FreshnessConfig, run_freshness

    cfg = FreshnessConfig(
        rate=100, trigger="realtime", duration_s=4, warmup_s=2, symbols=10, partitions=1
    )
    result = run_freshness(cfg)
    assert_figures(result, ["rate_target", "rate_achieved", "samples", "errors", "p50_ms"])
    assert result["trigger"] == "realtime" and result["rate_achieved"] > 0
    assert result["samples"] > 0, "a probe became visible through the stock API"
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    # Read from the progress records: a 4 s window within 5-minute batches holds at most one.
    assert result["batch_boundaries_in_window"] in (0, 1)


def test_tables_measures_rank_index_ttl_top_windows_and_equalities():
    from kiq.bench.tables import TablesConfig, run_tables

    cfg = TablesConfig(keys=3_000, entities=30, windows=20, requests=60, concurrency=4, ttl_s=2)
    result = run_tables(cfg)  # raises when top-10 differs from its reference
    assert_figures(
        result,
        [
            "ingest_plain_records_per_s",
            "restore_ranked_vs_plain",
            "ingest_ttl_ratio",
            "expiry_keys_per_s",
            "lookup_p99_ms",
            "top10_p50_ms",
            "windows_p50_ms",
            "top10_p50_vs_lookup",
            "restore_indexed_vs_plain",
            "by_equal_p99_ms",
            "by_equal_p99_vs_lookup",
            "by_equal_unloaded_p99_vs_lookup",
        ],
    )
    assert result["expiry_keys"] == cfg.keys
    assert result["lookup_errors"] == result["top10_errors"] == result["windows_errors"] == 0
    assert result["by_equal_errors"] == 0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed: `make deps`")
def test_tenants_refuses_the_flood_and_measures_the_other_tenant():
    from kiq.bench.tenants import TenantsConfig, run_tenants

    cfg = TenantsConfig(
        keys=200, quota=50, flood=10, background=100, rounds=1, duration_s=2, pin=False
    )
    result = run_tenants(cfg)  # raises when blue, within its quota, was refused
    assert_figures(
        result,
        [
            "blue_alone_p99_ms",
            "blue_beside_p99_ms",
            "p99_vs_alone",
            "red_asked_per_s",
            "red_answered_per_s",
            "red_refused",
        ],
    )
    # Red asked far past its quota: what went through is about the quota, the rest refused.
    assert result["red_asked_per_s"] > 5 * cfg.quota
    assert 0 < result["red_answered_per_s"] < 2 * cfg.quota
    assert result["red_refused"] > 0 and result["red_socket_errors"] == 0
    assert result["blue_rps"] > 0

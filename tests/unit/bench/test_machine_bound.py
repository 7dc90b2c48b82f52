"""What the lookup bench says the machine's cores allow, wrk's own CPU included."""

from __future__ import annotations

import os
import subprocess
import sys

from kiq.bench import lookups, wrk
from kiq.bench.wrk import WrkResult


def _run(requests: int, cpu_s: float) -> WrkResult:
    return WrkResult(
        requests=requests,
        rps=requests / 10,
        p50_ms=1.0,
        p75_ms=1.0,
        p90_ms=1.0,
        p99_ms=2.0,
        p999_ms=3.0,
        non_2xx=0,
        socket_errors=0,
        redirects=0,
        cpu_s=cpu_s,
    )


def test_bound_counts_server_and_load_generator() -> None:
    # 100,000 requests: servers 3 s (30 us each), wrk 2 s (20 us each) -> 50 us a request
    out = lookups._machine_bound(_run(100_000, 2.0), 3.0)
    cores = len(os.sched_getaffinity(0))
    assert out["load_cpu_us_per_request"] == 20.0
    assert out["cores_bound_rps"] == round(cores * 1e6 / 50, 1)


def test_no_bound_without_server_cpu() -> None:
    out = lookups._machine_bound(_run(100_000, 2.0), None)
    assert "cores_bound_rps" not in out


def test_worker_figures_compare_the_bound_with_one_process() -> None:
    single = {"rps": 20_000.0, "p99_ms": 5.0, "cpu_us": 30.0, "load_cpu_us": 20.0}
    bound = {"cores": 2, "cores_bound_rps": 32_000.0}
    out = lookups._worker_figures(single, 30_000.0, bound)
    assert out["workers_vs_single"] == 1.5
    assert out["cores_bound_vs_single"] == 1.6
    # at one process's 50 us a request, two cores allow 40,000 req/s: 2x
    assert out["cores_bound_at_single_cost_vs_single"] == 2.0


def test_children_cpu_grows_with_a_busy_child() -> None:
    before = wrk._children_cpu()
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    assert wrk._children_cpu() - before >= 0.25

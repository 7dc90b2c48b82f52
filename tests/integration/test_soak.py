"""A short soak: the stock application under mixed load through a node restart.

The bench (`kiq bench soak`) runs 30 minutes; this runs its machinery for a
couple, so the scenario keeps working and its figures mean what they say.
"""

from __future__ import annotations

import pytest

from kiq.bench.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_short_soak_has_no_errors_and_samples_every_process() -> None:
    result = run_soak(
        SoakConfig(duration_s=80, restart_every_s=35, rate=150, feed_rate=500, sample_every_s=10)
    )
    assert result["read_errors"] == 0, result["read_errors_sample"]
    assert int(str(result["reads"])) > 5_000
    restarts = result["restarts"]
    assert isinstance(restarts, list) and [r["node"] for r in restarts] == ["n2", "n3"]
    samples = result["samples"]
    assert isinstance(samples, list) and len(samples) >= 8
    for name in ("broker", "pipeline", "n1", "n2", "n3", "bench"):
        assert samples[-1][name]["rss_mb"] > 10, name
        assert samples[-1][name]["fds"] > 3, name
    freshness = result["freshness_ms"]
    assert isinstance(freshness, dict) and freshness["n"] >= 10 and freshness["errors"] == 0

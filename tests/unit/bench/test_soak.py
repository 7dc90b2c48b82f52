"""The soak's growth figures, from its samples."""

from __future__ import annotations

from kiq.bench.soak import _at_or_after, _growth


def _sample(at_s: int, n1: float, n2: float | None = None) -> dict[str, object]:
    sample: dict[str, object] = {"at_s": at_s, "n1": {"rss_mb": n1}}
    if n2 is not None:
        sample["n2"] = {"rss_mb": n2}
    return sample


def test_growth_is_the_end_less_the_sample_at_the_window_start():
    samples = [_sample(0, 100), _sample(600, 150, 90), _sample(1200, 160, 120), _sample(1800, 163)]
    assert _growth(samples, _at_or_after(samples, 1800 - 600)) == {"n1": 3.0}
    assert _growth(samples, _at_or_after(samples, 1000)) == {"n1": 3.0}
    assert _growth(samples, _at_or_after(samples, -5)) == {"n1": 63.0}
    assert _growth(samples[:1], samples[0]) == {}


def test_a_restarted_node_counts_from_its_last_run():
    samples = [_sample(0, 100, 100), _sample(300, 110, 140), _sample(600, 112, 95)]
    assert _growth(samples, samples[1]) == {"n1": 2.0, "n2": -45.0}

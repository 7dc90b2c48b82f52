from __future__ import annotations

import kiq.feeds


def test_the_public_api_is_exactly_all():
    public = {name for name in vars(kiq.feeds) if not name.startswith("_")}
    modules = {
        "errors",
        "pacing",
        "producer",
        "replay",
        "settings",
        "simulator",
        "symbols",
        "ticks",
    }
    assert public - modules == set(kiq.feeds.__all__)
    assert len(set(kiq.feeds.__all__)) == len(kiq.feeds.__all__)

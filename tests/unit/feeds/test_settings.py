from __future__ import annotations

from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.feeds import FeedSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    for name in ("EXCHANGES", "RATE", "TOPIC", "BOOTSTRAP", "SYMBOLS"):
        monkeypatch.delenv(f"KIQ_FEED_{name}", raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults_work_on_a_laptop():
    conf = settings.load(FeedSettings)
    assert conf.bootstrap == "127.0.0.1:9092" and conf.topic == "stock-ticks"
    assert (conf.symbols, conf.rate, conf.seed, conf.partitions) == (100, 500.0, 42, 30)
    assert conf.exchanges == ["NYSE", "NASDAQ", "ARCA", "BATS", "IEX"]
    assert conf.create_topic is True


def test_exchanges_from_flag_env_and_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    assert settings.load(FeedSettings, exchanges=" nyse, IEX ").exchanges == ["NYSE", "IEX"]
    monkeypatch.setenv("KIQ_FEED_EXCHANGES", "ARCA,BATS")
    assert settings.load(FeedSettings).exchanges == ["ARCA", "BATS"]
    monkeypatch.setenv("KIQ_FEED_EXCHANGES", '["EDGX"]')
    assert settings.load(FeedSettings).exchanges == ["EDGX"]
    monkeypatch.delenv("KIQ_FEED_EXCHANGES")
    cfg = tmp_path / "kiq.toml"
    cfg.write_text('[feed]\nexchanges = ["MEMX", "NYSE"]\nrate = 50\n')
    conf = settings.load(FeedSettings)
    assert conf.exchanges == ["MEMX", "NYSE"] and conf.rate == 50.0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"exchanges": "NYSE,,IEX"}, "exchanges"),
        ({"exchanges": "NYSE,nyse"}, "repeated: NYSE"),
        ({"exchanges": "NY SE"}, "exchanges"),
        ({"symbols": 0}, "KIQ_FEED_SYMBOLS"),
        ({"symbols": 10_000}, "symbols"),
        ({"rate": 0}, "--rate"),
        ({"topic": "bad topic"}, "topic"),
    ],
)
def test_bad_values_name_every_way_to_fix_them(flags, named):
    with pytest.raises(ConfigError) as info:
        settings.load(FeedSettings, **flags)
    assert named in str(info.value) and "[feed]" in str(info.value)

"""`kiq feed` errors that need no broker: each says what to fix, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.runtime.ports import free_port

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["feed", *args])
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split())


def test_help_lists_the_feeds():
    code, out = invoke("--help")
    assert code == 0 and "stocks" in out and "replay" in out


def test_no_broker_says_to_start_one_or_fix_bootstrap():
    code, out = invoke("stocks", "--bootstrap", f"127.0.0.1:{free_port()}", "--duration", "1")
    assert code == 1
    assert "no Kafka broker answers" in out and "kiq broker start" in out and "--bootstrap" in out


def test_a_bad_exchange_list_names_the_flag():
    code, out = invoke("stocks", "--exchanges", "NYSE,,NASDAQ")
    assert code == 1
    assert "--exchanges" in out and "KIQ_FEED_EXCHANGES" in out and "like NYSE,NASDAQ" in out


def test_a_bad_duration_is_refused():
    code, out = invoke("stocks", "--duration", "0")
    assert code == 1 and "--duration must be a positive number" in out


def test_replay_of_a_missing_file_says_so(tmp_path: Path):
    code, out = invoke("replay", str(tmp_path / "nope.jsonl"))
    assert code == 1 and "cannot read" in out and "nope.jsonl" in out


def test_replay_with_a_bad_rate_is_refused(tmp_path: Path):
    (tmp_path / "t.jsonl").write_text("")
    code, out = invoke("replay", str(tmp_path / "t.jsonl"), "--rate", "-5")
    assert code == 1 and "--rate must be a positive number" in out

from __future__ import annotations

from typer.testing import CliRunner

from kiq.cli.main import app

runner = CliRunner()


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "broker" in result.output and "demo" in result.output


def test_bad_flag_value_is_a_one_line_error_not_a_traceback():
    result = runner.invoke(app, ["broker", "start", "--port", "70000"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "KIQ_BROKER_PORT" in result.output and "[broker] port" in result.output


def test_status_of_a_broker_that_never_ran(tmp_path):
    result = runner.invoke(app, ["broker", "status", "--port", "1", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "stopped" in result.output


def test_pipeline_flags_go_through_the_settings(monkeypatch):
    monkeypatch.delenv("KIQ_PIPELINE_PARTITIONS", raising=False)
    result = runner.invoke(app, ["pipeline", "run", "stocks", "--partitions", "0"])
    assert result.exit_code == 1
    assert "KIQ_PIPELINE_PARTITIONS" in result.output and "[pipeline] partitions" in result.output
    monkeypatch.setenv("KIQ_PIPELINE_TRIGGER", "sometimes")
    result = runner.invoke(app, ["pipeline", "run", "stocks"])
    assert result.exit_code == 1 and "KIQ_PIPELINE_TRIGGER" in result.output

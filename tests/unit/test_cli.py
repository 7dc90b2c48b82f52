from __future__ import annotations

import socket

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


def test_up_checks_the_application_file_before_starting_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "app.toml"
    config.write_text('[app]\nendpoints = ["nowhere.py:routes"]\n[serve]\ntables = ["t=t"]\n')
    result = runner.invoke(app, ["up", "--config", str(config)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"no file {tmp_path / 'nowhere.py'}" in result.output.replace("\n", "")
    config.write_text("[app]\nnodes = 2\n")
    result = runner.invoke(app, ["up", "--config", str(config)])
    assert result.exit_code == 1 and "nothing to serve" in result.output
    result = runner.invoke(app, ["up", "--config", str(config), "--nodes", "0"])
    assert result.exit_code == 1 and "KIQ_APP_NODES" in result.output
    assert not (tmp_path / ".kiq").exists(), "nothing started, nothing written"


def test_serve_finds_its_endpoints_before_asking_kafka(tmp_path):
    config = tmp_path / "app.toml"
    config.write_text(
        '[app]\nendpoints = ["kiq.apps.stocks.api:nope"]\n[serve]\ntables = ["t=t"]\n'
    )
    result = runner.invoke(app, ["serve", "--config", str(config), "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 1 and "has no function 'nope'" in result.output


def test_the_shipped_demo_file_is_a_valid_application():
    from kiq.cli.demo import app_file
    from kiq.cli.up import Plan

    plan = Plan.load(app_file(), None)
    assert plan.app.pipelines == ["stocks", "wordcount"]
    assert plan.node.app.endpoints == [
        "kiq.apps.stocks.api:routes",
        "kiq.apps.wordcount.api:routes",
    ]
    assert plan.served == [], "the pipelines declare the tables: the file does not repeat them"
    assert plan.app.home_dir.as_posix() == ".kiq/demo" and plan.app.nodes == 3


def test_kiq_up_hands_the_limits_to_its_nodes(tmp_path, monkeypatch):
    import threading

    from kiq.cli.up import Plan, Running

    monkeypatch.delenv("KIQ_LIMITS_RATE_LIMIT", raising=False)
    config = tmp_path / "app.toml"
    config.write_text('[serve]\ntables = ["t=t"]\n[limits]\nrate_limit = 5\nmax_connections = 7\n')
    plan = Plan.load(config, None, {"max_connections": 9}, endpoints=[])
    assert (plan.limits.rate_limit, plan.limits.max_connections) == (5, 9)  # the flag wins
    node = Running(plan, threading.Event()).nodes[0]
    assert node.env["KIQ_LIMITS_RATE_LIMIT"] == "5.0"
    assert node.env["KIQ_LIMITS_MAX_CONNECTIONS"] == "9"


def test_kiq_up_hands_every_child_the_settings_it_read(tmp_path, monkeypatch):
    """One environment for driver, nodes and feeds: the file's sections with the broker
    `kiq up` uses, files as absolute paths; its own process environment is left alone."""
    import os
    import threading

    from kiq.cli.up import Plan, Running
    from kiq.settings import NodeSettings

    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pw").write_text("secret\n")
    config = tmp_path / "app.toml"
    config.write_text(
        '[serve]\ntables = ["t=t"]\n[app]\nendpoints = []\nbootstrap = "k:9"\n'
        '[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_username = "u"\n'
        'sasl_password_file = "pw"\n'
    )
    plan = Plan.load(config, "microbatch")
    running = Running(plan, threading.Event())
    env = running.env
    assert running.security.username == "u" and running.security.password == "secret"
    assert env["KIQ_BOOTSTRAP"] == env["KIQ_SERVE_BOOTSTRAP"] == "k:9"
    assert env["KIQ_PIPELINE_BOOTSTRAP"] == env["KIQ_FEED_BOOTSTRAP"] == "k:9"
    assert env["KIQ_PIPELINE_TRIGGER"] == "microbatch"
    assert env["KIQ_KAFKA_SASL_PASSWORD_FILE"] == str(tmp_path / "pw")
    assert env["KIQ_CONFIG"] == str(config)
    assert all(node.env == env for node in running.nodes)
    assert not any(name.startswith("KIQ_") for name in os.environ)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path.parent)  # a feed runs elsewhere
    child = NodeSettings.load()
    assert (child.app, child.limits, child.auth) == (plan.app, plan.limits, plan.auth)
    assert child.kafka.sasl_password_file == tmp_path / "pw"
    assert child.serve.tables == ["t=t"] and child.serve.bootstrap == "k:9"


def test_bad_limits_are_a_one_line_error(tmp_path):
    result = runner.invoke(app, ["serve", "--bootstrap", "127.0.0.1:1", "--rate-limit", "-1"])
    assert result.exit_code == 1 and "KIQ_LIMITS_RATE_LIMIT" in result.output


def test_a_port_another_process_holds_is_a_one_line_error_before_joining(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        argv = ["serve", "--bootstrap", "127.0.0.1:1", "--port", str(port)]
        result = runner.invoke(app, [*argv, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert f"127.0.0.1:{port} is already in use" in result.output
    assert "KIQ_SERVE_PORT" in result.output and "Traceback" not in result.output


def test_kiq_demo_hands_its_feed_only_the_flags_given():
    """What is not given is the [feed] setting, which the feed reads as any kiq command."""
    from kiq.cli.demo import _feeds

    assert _feeds(True, None, None) is None  # the file's feed
    assert _feeds(False, 700.0, 5) == []
    assert _feeds(True, 700.0, None) == [["kiq", "feed", "stocks", "--rate", "700"]]
    assert _feeds(True, None, 5) == [["kiq", "feed", "stocks", "--symbols", "5"]]


def test_version_prints_the_installed_version_and_exits():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"kiq {version('kiq')}\n"
    assert runner.invoke(app, ["--version", "serve", "--help"]).output == result.output

"""The shipped alert rules and board (``deploy/``): promtool checks the rules and runs their
unit tests; every alert has tests that see it fire and stay quiet; every metric the rules and
the board read is one a node serves, as scraped from a node built in process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kiq.progress import ProgressMetrics, ProgressReader, QueryProgress
from kiq.replicas import ReplicaState
from tests.prometheus import (
    BOARD,
    CONFIG,
    RULE_TESTS,
    RULES,
    alerts,
    board_exprs,
    metric_names,
    tool,
    with_for,
)
from tests.unit.stand_ins import Cluster, call, serving, start_node, wait_until

DOCS = Path(__file__).parents[3] / "docs" / "operations" / "alerts.md"
# Prometheus's own series about each target, not a node's.
PROMETHEUS_OWN = {"up"}


def promtool(*args: str) -> str:
    done = subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, cwd=RULES.parent, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_rules_and_the_example_config():
    assert f"SUCCESS: {len(alerts())} rules found" in promtool("check", "rules", RULES.name)
    promtool("check", "config", CONFIG.name)  # with the rules it loads


def test_promtool_runs_the_rules_unit_tests():
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS.name)


def test_every_alert_is_tested_firing_and_quiet():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired, quiet = set(), set()
    for case in tests:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert fired == set(alerts()) and quiet == set(alerts())


def test_every_alert_says_how_bad_what_and_where_to_read_more():
    headings = {
        line.removeprefix("### ").strip().lower()
        for line in DOCS.read_text().splitlines()
        if line.startswith("### ")
    }
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["annotations"]["runbook"] == f"docs/operations/alerts.md#{name.lower()}"
        assert name.lower() in headings, f"{name} has no section in {DOCS.name}"
        assert "for" in rule, name


def test_shortening_the_waits_keeps_every_expression():
    short = alerts_of(with_for(RULES.read_text(), "1s"))
    assert {n: r["expr"] for n, r in short.items()} == {n: r["expr"] for n, r in alerts().items()}
    assert {r["for"] for r in short.values()} == {"1s"}


def alerts_of(text: str) -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(text)["groups"] for r in g["rules"]}


def test_the_metric_names_are_found_in_an_expression():
    # The check below is only as good as this reading of PromQL.
    expr = (
        'sum by (instance) (rate(kiq_requests_total{status=~"5.."}[5m])) / '
        "max without (role) (kiq_replica_lag offset 1h) > 0.05 and on (table) up == 0"
    )
    assert metric_names(expr) == {"kiq_requests_total", "kiq_replica_lag", "up"}
    assert metric_names('label_values(up{job="kiq"}, instance)') == {"up"}


@pytest.fixture
def served(tmp_path: Path) -> set[str]:
    """The names of every series a node's /metrics shows, scraped from a node in process with
    a replica, requests answered and a pipeline's progress to show."""
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    local = start_node(tmp_path, cluster, {"t=t,standby=0": 1})
    try:
        wait_until(serving(local.node, ReplicaState.ACTIVE), what="n1 active")
        metrics = local.node.metrics
        # As build_node adds them (kiq.node_build): RocksDB's memory, the pipelines' progress.
        metrics.watch_store_memory(lambda: (0, 0), 1 << 20)
        query = QueryProgress(
            app="kiq", pipeline="p", query="q", behind=0, published_ms=int(time.time() * 1000)
        )
        reader = ProgressReader("b", "kiq", read_latest=lambda *a, **k: {query.key: query.encode()})
        metrics.registry.register(ProgressMetrics(reader))
        reader.queries()  # read: a scrape shows the last read
        asyncio.run(call(local.app, "GET", "/v1/tables/t/keys/nothing"))
        text = asyncio.run(call(local.app, "GET", "/metrics")).body.decode()
    finally:
        local.node.stop()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_metric_the_rules_and_the_board_read_is_one_a_node_serves(served: set[str]):
    assert {"kiq_requests_total", "kiq_replica_ready", "kiq_pipeline_stale"} <= served
    for name, rule in alerts().items():
        unknown = metric_names(rule["expr"]) - served - PROMETHEUS_OWN
        assert not unknown, f"alert {name} reads {unknown}, which no node serves"
    board = board_exprs()
    assert board
    for expr in board:
        unknown = metric_names(expr) - served - PROMETHEUS_OWN
        assert not unknown, f"the board's {expr!r} reads {unknown}, which no node serves"


def test_the_board_asks_for_its_data_source_and_reads_it_everywhere():
    import json

    document = json.loads(BOARD.read_text())
    variables = {v["name"]: v for v in document["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in document["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    ids = [p["id"] for p in document["panels"]]
    assert len(ids) == len(set(ids))

"""Prometheus for tests: Debian's ``prometheus`` package (``prometheus`` and ``promtool``;
``scripts/ensure-deps.sh`` installs it on CI), and what the tests read of the shipped rules
(``deploy/prometheus/``) and board (``deploy/grafana/``)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "kiq-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "kiq-alerts.test.yml"
CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
BOARD = DEPLOY / "grafana" / "kiq.json"
INSTALL = "apt-get install -y --no-install-recommends prometheus (scripts/ensure-deps.sh does)"

# What in a PromQL expression is not a metric's name.
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "offset", "bool"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan"}


def tool(name: str) -> str:
    """``prometheus`` or ``promtool``; on a machine without them the test fails on CI, else is
    skipped."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed: {INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def alerts(rules: Path = RULES) -> dict[str, dict[str, Any]]:
    """Each alerting rule of a rules file, by its name."""
    groups = yaml.safe_load(rules.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def board_exprs(board: Path = BOARD) -> list[str]:
    """Every query of the Grafana board: its panels' and its variables'."""
    found = []
    document = json.loads(board.read_text())
    for panel in document["panels"]:
        found += [t["expr"] for t in panel.get("targets", ())]
    for variable in document["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression (or a Grafana ``label_values(...)``) reads: its names
    less functions, keywords, label matchers and groupings, ranges, strings and numbers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"label_values\((.*),\s*\w+\)", r"\1", text)  # Grafana's: (query, label)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\w+", " ", text)  # Grafana's variables
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", text):
        name, call = match.groups()
        if not call and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def with_for(rules_text: str, duration: str) -> str:
    """A rules file with every ``for:`` made ``duration``, everything else as it was."""
    return re.sub(r"(?m)^(\s+for:\s*)\S+\s*$", rf"\g<1>{duration}", rules_text)

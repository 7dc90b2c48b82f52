"""The dashboard at /ui cannot be framed, and loads nothing but its own files and data."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.ops.dashboard import ASSETS
from tests.unit.stand_ins import Cluster, LocalNode, call, start_node

UI = Path(__file__).parents[3] / "src/kiq/ops/ui"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    local = start_node(tmp_path, cluster, {"t=t,standby=0": 1}, "n1")
    yield local
    local.node.stop()


def _policy(value: str) -> dict[str, list[str]]:
    directives = (part.split() for part in value.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


@pytest.mark.parametrize("target", ["/ui", "/ui/", "/ui/dashboard.js", "/ui/dashboard.css"])
def test_every_file_of_the_page_says_it_may_not_be_framed_or_load_from_elsewhere(
    node: LocalNode, target: str
):
    r = asyncio.run(call(node.app, "GET", target))
    assert r.status == 200
    policy = _policy(r.headers["content-security-policy"])
    assert policy["default-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]  # no inline script, no eval
    assert policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_page_needs_nothing_the_policy_forbids():
    """No inline script, style or event handler: the policy leaves the page whole."""
    assert {p.name for p in UI.iterdir()} == set(ASSETS)
    index = (UI / "index.html").read_text()
    assert re.findall(r"<script\b[^>]*>", index) == ['<script src="/ui/dashboard.js">']
    assert "<style" not in index
    assert not re.search(r"\s(style|on[a-z]+)=", index)
    script = (UI / "dashboard.js").read_text()
    assert not re.search(r"\beval\(|new Function\(|setAttribute\(\s*[\"']style|innerHTML", script)

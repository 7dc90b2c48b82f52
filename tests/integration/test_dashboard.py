"""The dashboard at /ui in a real browser, on a live cluster fed by the stock pipeline.

Ticks → the stock pipeline (a real Spark driver, which publishes its queries' progress to
``kiq-progress``) → two nodes. Headless Chromium loads a node's /ui and must show what the
cluster says of itself: both node ids, every partition's active and standby where
/v1/metadata puts them, the tables, the pipeline's queries with their progress as
/v1/pipelines gives it, and the stock board with prices. A screenshot is kept in the
test's directory.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx
import pytest

from kiq.apps.stocks.pipeline import TABLES_QUERY, StockTopics
from kiq.kafka import create_topics, delete_topics
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.browser import chromium, open_page
from tests.integration.stock_feed import (
    MIDNIGHT,
    PARTITIONS,
    TickLog,
    make_ticks,
    served_tables,
    wait_topics,
)
from tests.integration.test_serving import Cluster

pytestmark = pytest.mark.spark


def _progress(url: str) -> list[dict]:
    resp = httpx.get(f"{url}/v1/pipelines", timeout=10)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["queries"])


def _wait_progress(url: str, timeout_s: float = 120) -> list[dict]:
    """Until the stock query's progress, published by its driver, shows a batch with rows."""
    deadline = time.monotonic() + timeout_s
    queries: list[dict] = []
    while time.monotonic() < deadline:
        queries = _progress(url)
        if any(q["query"] == TABLES_QUERY and q["input_rows"] > 0 for q in queries):
            return queries
        time.sleep(0.5)
    raise AssertionError(f"no progress of {TABLES_QUERY} with rows: {queries}")


def test_the_dashboard_shows_the_cluster_the_pipeline_and_the_board(bootstrap: str, tmp_path: Path):
    chromium()  # fails (CI) or skips before anything starts when it is missing
    topics = StockTopics()
    delete_topics(bootstrap, [topics.ticks, topics.dead_letters, *_tables(topics)])
    create_topics(bootstrap, {topics.ticks: PARTITIONS})
    log = TickLog(bootstrap, topics.ticks)
    log.send(make_ticks(random.Random(27), 400, MIDNIGHT + 60_000))

    pipeline = LocalPipeline(
        ("stocks",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        trigger="microbatch",
        partitions=PARTITIONS,
    )
    pipeline.start()
    cluster = Cluster(bootstrap, tmp_path, served_tables(topics))
    try:
        wait_topics(bootstrap, topics, timeout_s=120)
        for node_id in ("n1", "n2"):
            cluster.add(node_id)
        cluster.wait_ready()
        url = cluster.nodes["n1"].url
        queries = _wait_progress(url)
        meta = httpx.get(f"{url}/v1/metadata", params={"cluster": "true"}, timeout=10).json()
        asyncio.run(_check_page(url, meta, queries, tmp_path))
    finally:
        pipeline.stop()
        cluster.shutdown()

    # The driver stopped cleanly: its queries' last records say so (the page greys them).
    stopped = {q["query"]: q["state"] for q in _read_progress_topic(bootstrap)}
    assert stopped.get(TABLES_QUERY) == "stopped", stopped


async def _check_page(url: str, meta: dict, queries: list[dict], tmp: Path) -> None:
    async with open_page(f"{url}/ui", tmp / "chromium", tmp / "chromium.log") as page:
        # The cluster map: one table of nodes x partitions per served table.
        await page.wait_for(
            "document.querySelector('.map[data-table=\"stock-quotes\"]')", 30, "the cluster map"
        )
        shown = await page.evaluate(
            """Object.fromEntries([...document.querySelectorAll('.map')].map((m) => [
                 m.dataset.table,
                 [...m.querySelectorAll('tbody tr')].map((row) => [row.dataset.node,
                   [...row.querySelectorAll('.cell')].map((c) => c.dataset.role)])]))"""
        )
        assert set(shown) == set(meta["tables"]) >= {"stock-quotes", "stock-bars-1m"}
        for name, table in meta["tables"].items():
            rows = dict(shown[name])
            assert set(rows) == {"n1", "n2"}, rows
            for part in table["partitions"]:
                p = part["partition"]
                roles = {node: cells[p] for node, cells in rows.items()}
                expected = {n: "active" if n == part["active"] else "standby" for n in rows}
                # A standby may still be restoring; the active one is where metadata says.
                assert roles[part["active"]] == "active", (name, p, roles)
                for node, role in roles.items():
                    assert role in (expected[node], "restoring"), (name, p, roles)
        header = await page.evaluate("document.getElementById('node').textContent")
        assert "node n1" in header and "2 nodes" in header

        # The pipeline's queries, with the figures their driver published.
        await page.wait_for(
            f"document.querySelector('tr[data-query=\"{TABLES_QUERY}\"]')",
            15,
            "the stock query's progress",
        )
        row = await page.evaluate(
            f"""[...document.querySelector('tr[data-query="{TABLES_QUERY}"]').children]
                .map((td) => td.textContent)"""
        )
        published = next(q for q in queries if q["query"] == TABLES_QUERY)
        assert row[:4] == ["stocks", TABLES_QUERY, "microbatch", "running"], row
        behind, batch = row[7], row[6]
        assert behind.replace(",", "").isdigit() and batch.endswith(("ms", " s")), row
        assert published["batch"] >= 0 and published["pipeline"] == "stocks"

        # This node's tables, and the stock board: quotes shown, by stream or by polling.
        await page.wait_for(
            "document.querySelector('#tables tr[data-table=\"stock-quotes\"]')",
            10,
            "this node's tables",
        )
        await page.wait_for(
            "[...document.querySelectorAll('#board tr[data-symbol]')].filter((r) => "
            "/\\d/.test(r.children[1].textContent)).length",
            30,
            "stock prices on the board",
        )
        # The stream opens after the first prices are shown: until then the mode says so.
        await page.wait_for(
            "/^(live|polling)/.test(document.getElementById('board-mode').textContent)",
            15,
            "the board's mode: live or polling",
        )
        problem = await page.evaluate("document.getElementById('problem').hidden")
        assert problem, await page.evaluate("document.getElementById('problem').textContent")
        await page.screenshot(tmp / "dashboard.png")
    assert (tmp / "dashboard.png").stat().st_size > 20_000


def _tables(topics: StockTopics) -> list[str]:
    return [topics.quotes, topics.day_stats, topics.bars]


def _read_progress_topic(bootstrap: str) -> list[dict]:
    from kiq.catalog import PROGRESS_TOPIC
    from kiq.kafka import compacted

    return [json.loads(v) for v in compacted.read_latest(bootstrap, PROGRESS_TOPIC).values()]


def test_the_page_works_under_its_policy_and_no_page_can_frame_it(
    bootstrap: str, make_topic, tmp_path: Path
):
    """Chromium enforces /ui's Content-Security-Policy: the page still fills in with no
    violation reported, and a frame of it (even from its own origin) stays empty."""
    from kiq.runtime.nodes import LocalNode
    from tests.integration.kafka_io import produce

    chromium()
    topic = make_topic("framed")
    produce(bootstrap, topic, [("k", json.dumps({"v": 1}))])
    node = LocalNode(
        "f1",
        bootstrap,
        [f"framed={topic}"],
        tmp_path / "f1",
        tmp_path / "f1.log",
        extra_args=["--cluster", f"kiq-framed-{time.monotonic_ns()}"],
    )
    node.start()
    try:
        node.wait_ready(90)
        asyncio.run(_check_policy(node.url, tmp_path))
    finally:
        node.stop()


async def _check_policy(url: str, tmp: Path) -> None:
    async with open_page("about:blank", tmp / "chromium", tmp / "chromium.log") as page:
        await page.send(
            "Page.addScriptToEvaluateOnNewDocument",
            source="window.violations = []; document.addEventListener("
            "'securitypolicyviolation', (e) => window.violations.push(e.violatedDirective));",
        )
        await page.send("Page.navigate", url=f"{url}/ui")
        await page.wait_for(
            "document.getElementById('node')?.textContent.includes('f1')", 30, "the node's id"
        )
        await page.wait_for(
            "document.querySelector('#tables tr[data-table]')", 15, "this node's tables"
        )
        assert await page.evaluate("window.violations") == []
        framed = await page.evaluate(
            """new Promise((done) => {
                 const frame = document.createElement('iframe');
                 frame.src = '/ui';
                 frame.onload = () => {
                   let title = null;
                   try { title = frame.contentDocument && frame.contentDocument.title; }
                   catch (e) { title = null; }
                   done(title);
                 };
                 document.body.append(frame);
                 setTimeout(() => done('no load event'), 10000);
               })"""
        )
        assert framed != "kiq dashboard", framed

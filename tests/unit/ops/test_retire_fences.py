"""POST /v1/tables/{t}/retire of a forged declaration: the live topics it names survive, the
answer and the log name what was kept and why, and the catalog change is whole.

The two in-process nodes and the fake catalog are tests/unit/api/test_versions_api.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from kiq.tables.declared import Declared
from tests.unit.ops.test_versions_api import Pair, declared, post, start_pair
from tests.unit.stand_ins import wait_until


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    started = start_pair(tmp_path, monkeypatch)
    yield started
    for local in started.nodes:
        local.node.stop()


def _served(pair: Pair, name: str) -> None:
    for local in pair.nodes:
        wait_until(lambda local=local: name in local.node.tables, what=f"{name} served")


def _with(d: Declared, **fields: object) -> Declared:
    return msgspec.structs.replace(d, **fields)


def test_retiring_a_version_declared_with_another_apps_live_topic_keeps_that_topic(
    pair: Pair, caplog: pytest.LogCaptureFixture
):
    # another application's table, which these nodes do not serve: only the catalog knows it
    ledger = _with(declared("ledger", "v3", "ledger.v3"), app="books")
    ledger = _with(ledger, dead_letters=("ledger-dlq.v3",))
    # v3 of totals, declared with the ledger's topic and dead letters (names that even end
    # as kiq derives v3's)
    forged = _with(declared("totals", "v3", "ledger.v3"), dead_letters=("ledger-dlq.v3",))
    for topic in ("ledger.v3", "ledger-dlq.v3"):
        pair.topics[topic] = 2
        pair.catalog.topics.add(topic)
    pair.catalog.declare(ledger, forged)
    _served(pair, "totals@v3")
    with caplog.at_level(logging.INFO, logger="kiq.ops.versions"):
        r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v3"})
    assert r.status == 200, r.body
    answer = r.json()
    assert {"ledger.v3", "ledger-dlq.v3"} <= pair.catalog.topics, "the ledger's topics stay"
    assert answer["topics_deleted"] == []
    kept = {k["topic"]: k["reason"] for k in answer["topics_kept"]}
    assert kept == {
        "ledger.v3": "the declaration table:books/ledger@v3 names it",
        "ledger-dlq.v3": "the declaration table:books/ledger@v3 names it",
    }
    assert "retire kept table=totals version=v3 topic=ledger.v3" in caplog.text
    # the declaration's tombstone is written all the same: no half-changed catalog
    written = pair.catalog.keys()  # (key, tombstone?) of the catalog records put
    assert ("table:shop/totals@v3", True) in written
    for local in pair.nodes:
        assert "totals@v3" not in local.node.tables
        assert "totals@v2" in local.node.tables


def test_a_topic_kiq_does_not_derive_for_the_version_is_kept(pair: Pair):
    pair.topics["raw-orders"] = 2
    pair.catalog.topics.add("raw-orders")
    pair.catalog.declare(declared("totals", "v3", "raw-orders"))  # not TOPIC.v3
    _served(pair, "totals@v3")
    r = post(pair.n2, "/v1/tables/totals/retire", {"version": "v3"})
    assert r.status == 200, r.body
    assert "raw-orders" in pair.catalog.topics
    kept = {k["topic"]: k["reason"] for k in r.json()["topics_kept"]}
    assert kept["raw-orders"] == "not a topic kiq derives for v3 (TOPIC.v3)"


def test_a_topic_a_query_reads_is_kept(pair: Pair):
    pair.topics["orders-in.v3"] = 2
    pair.catalog.topics.add("orders-in.v3")
    pair.catalog.declare(declared("totals", "v3", "orders-in.v3", pipeline="late"))
    _served(pair, "totals@v3")
    pair.progress.say(
        "enrich", "q", state="running", sources=[{"source": "KafkaV2[Subscribe[orders-in.v3]]"}]
    )
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v3"})
    assert r.status == 200, r.body
    assert "orders-in.v3" in pair.catalog.topics
    kept = {k["topic"]: k["reason"] for k in r.json()["topics_kept"]}
    assert kept["orders-in.v3"] == "a pipeline's query reads it"


def test_the_checkpoint_stays_while_another_declaration_shares_it(pair: Pair):
    # another pipeline's table, recorded with the same checkpoint directory as totals v2
    other = declared("counts", "v2", "counts.v2", pipeline="counting")
    # not served here (another application's): only the catalog knows of it
    other = _with(other, checkpoint="/ck/orders@v2", app="elsewhere")
    pair.catalog.declare(other)
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 200, r.body
    assert (r.json()["last_of_run"], r.json()["checkpoint"]) == (False, None)


def test_a_catalog_that_cannot_be_read_refuses_with_nothing_changed(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
):
    async def broken() -> dict[str, bytes]:
        raise RuntimeError("broker gone")

    monkeypatch.setattr(pair.catalog, "latest", broken)
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 503
    assert "nothing was changed" in r.json()["message"]
    assert pair.catalog.records == [] and pair.catalog.deleted == []
    assert "totals@v2" in pair.n1.node.tables


def test_a_topic_the_broker_will_not_delete_is_named_not_raised(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
):
    async def refuse(topics: object) -> list[str]:
        raise RuntimeError("TOPIC_AUTHORIZATION_FAILED")

    monkeypatch.setattr(pair.catalog, "delete_topics", refuse)
    r = post(pair.n1, "/v1/tables/totals/retire", {"version": "v2"})
    assert r.status == 200, r.body
    answer = r.json()
    assert answer["topics_deleted"] == []
    assert {k["topic"] for k in answer["topics_kept"]} == {"totals.v2", "totals-dlq.v2"}
    assert all("TOPIC_AUTHORIZATION_FAILED" in k["reason"] for k in answer["topics_kept"])
    written = pair.catalog.keys()
    assert ("table:shop/totals@v2", True) in written

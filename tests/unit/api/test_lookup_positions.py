"""Lookups and position tokens: every answer names what it read, and a token sent back is
a ``min_offset`` for the key's partition (one node in process, one partition)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.peers.wire import Lookup, Outcome, decode_results, encode
from kiq.positions import decode
from kiq.settings import LimitsSettings
from tests.unit.api.test_parked_waits import land, node_with, replica_of
from tests.unit.stand_ins import LocalNode, Response, call


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    made = node_with(tmp_path, LimitsSettings())
    land(made, "k", b'{"n":1}', 4)
    land(made, "other", b'{"n":2}', 6)  # the partition's applied offset: 6
    yield made
    made.node.stop()


def get(node: LocalNode, key: str, query: str = "", after: str | None = None) -> Response:
    target = f"/v1/tables/t/keys/{key}" + (f"?{query}" if query else "")
    headers = [] if after is None else [(b"x-kiq-after", after.encode())]
    return asyncio.run(call(node.app, "GET", target, headers=headers))


def test_every_answer_names_the_offset_its_replica_applied(node):
    plain = get(node, "k")  # the fast path
    assert (plain.status, plain.headers["x-kiq-offset"]) == (200, "4")
    assert plain.headers["x-kiq-position"] == "t:0=6"
    general = get(node, "k", "max_lag=100")
    assert general.headers["x-kiq-position"] == "t:0=6"
    missing = get(node, "nobody")
    assert missing.status == 404
    assert missing.headers["x-kiq-position"] == "t:0=6"
    land(node, "k", b'{"n":3}', 9)
    assert get(node, "k").headers["x-kiq-position"] == "t:0=9"


def test_a_token_at_or_behind_the_replica_is_answered_at_once(node):
    for after in ("t:0=6", "t:0=0", "other:0=99", "t:1=99", ""):
        answer = get(node, "k", after=after)
        assert answer.status == 200, (after, answer.body)
        assert answer.json() == {"n": 1}
        assert answer.headers["x-kiq-position"] == "t:0=6"
    assert get(node, "k", "after=t:0=5").status == 200


def test_a_token_past_the_replica_is_503_with_retry_after_and_the_lag(node):
    for answer in (get(node, "k", after="t:0=10"), get(node, "k", "after=t:0=10")):
        assert answer.status == 503, answer.body
        body = answer.json()
        assert (body["error"], body["applied_offset"], body["lag"]) == ("unavailable", 6, 4)
        assert answer.headers["retry-after"] == "1"
    # the larger of min_offset and the token's offset is what must be applied
    assert get(node, "k", "min_offset=10", after="t:0=2").status == 503
    assert get(node, "k", "min_offset=2", after="t:0=10").status == 503
    assert get(node, "k", "min_offset=2", after="t:0=6").status == 200
    # both a header and ?after=: both count
    assert get(node, "k", "after=t:0=10", after="t:0=1").status == 503


def test_a_token_past_the_replica_waits_up_to_wait_ms_for_it(node):
    async def scenario() -> Response:
        headers = [(b"x-kiq-after", b"t:0=8")]
        target = "/v1/tables/t/keys/k?wait_ms=5000"
        parked = asyncio.create_task(call(node.app, "GET", target, headers=headers))
        await asyncio.sleep(0.1)
        assert not parked.done()
        await asyncio.to_thread(land, node, "k", b'{"n":5}', 8)
        return await asyncio.wait_for(parked, 2.0)

    answer = asyncio.run(scenario())
    assert (answer.status, answer.json()) == (200, {"n": 5})
    assert answer.headers["x-kiq-position"] == "t:0=8"


@pytest.mark.parametrize("after", ["t:0", "t:0=x", "bad table:0=1", "t:0=" + "9" * 40, "t:" * 5000])
def test_a_malformed_token_is_a_400(node, after):
    for answer in (get(node, "k", after=after), get(node, "k", f"after={after}")):
        assert answer.status == 400, answer.body
        assert answer.json()["error"] == "bad_request"


def test_another_nodes_lookups_carry_the_applied_offset_back(node):
    asked = [Lookup("t", b"k"), Lookup("t", b"nobody"), Lookup("t", b"k", min_offset=20)]
    results = decode_results(asyncio.run(node.app.lookups.internal(encode(asked))))
    assert [r.outcome for r in results] == [Outcome.FOUND, Outcome.MISSING, Outcome.UNAVAILABLE]
    assert [r.applied for r in results[:2]] == [6, 6]
    assert (results[2].offset, results[2].lag) == (6, 14)


def test_a_token_names_the_tables_internal_name(node):
    answer = get(node, "k")
    assert decode(answer.headers["x-kiq-position"]) == {("t", 0): replica_of(node).applied_offset}


def test_a_token_the_replica_has_reached_is_answered_in_the_fast_path(node, monkeypatch):
    lookups = node.app.lookups
    general = lookups._get
    taken: list[str] = []

    async def counted(*args, **kwargs):
        taken.append("general")
        return await general(*args, **kwargs)

    monkeypatch.setattr(lookups, "_get", counted)
    for after in ("t:0=6", "t:1=99;u:0=1", "a:0=1;t:0=2,3=4"):
        assert get(node, "k", after=after).headers["x-kiq-position"] == "t:0=6"
    assert taken == []
    assert get(node, "k", after="t:0=7").status == 503  # behind it: the general way, waits
    assert get(node, "k", after="t:0=x").status == 400
    assert taken == ["general"]  # a malformed token is refused where it is read

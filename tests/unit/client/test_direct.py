"""A plain lookup's first attempt, made outside the flow (``kiq.client.direct``): the same
requests and outcomes as the flow alone, so a failure goes on as the flow's attempt 0."""

from __future__ import annotations

import asyncio

import pytest

from kiq.client import AsyncClient, Client, KeyNotFound, RetryPolicy
from kiq.client.calls import segment
from kiq.client.position import SessionPosition
from tests.unit.client.fake_cluster import NODES, FakeCluster

KEYS = [f"k{i}" for i in range(12)]
FAST = RetryPolicy(attempts=4, backoff_s=0.001, max_backoff_s=0.002)


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster(values={k: {"n": i} for i, k in enumerate(KEYS)})
    for odd in ("a/b", "..", ".", "ü ?%", "x.y~_-"):
        fake.values[odd] = {"odd": odd}
    return fake


def client(cluster: FakeCluster) -> Client:
    made = Client([NODES["n1"]], transport=cluster.transport(), retry=FAST)
    made._core.router._min_interval_s = 0
    return made


def sent(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(node, path) for node, _, path in cluster.asked if "/keys/" in path]


def test_a_first_attempt_that_fails_is_not_made_twice(cluster):
    key = next(k for k in KEYS if cluster.active_url(k) == NODES["n1"])
    with client(cluster) as kiq:
        kiq.get("t", "k0")
        cluster.asked.clear()
        cluster.failing = {"n1": 1}  # a 503: the flow goes on with the standby
        assert kiq.get("t", key) == {"n": KEYS.index(key)}
        assert [node for node, _ in sent(cluster)] == ["n1", "n2"]
        cluster.asked.clear()
        cluster.down.add("n1")  # no answer: the same, as attempt 0's outcome
        assert kiq.lookup("t", key).served_by == "n2"
        assert [node for node, _ in sent(cluster)] == ["n1", "n2"]
        cluster.down.clear()
        cluster.asked.clear()
        with pytest.raises(KeyNotFound):
            kiq.get("t", "nope")  # a 404 is the flow's to raise, once
        assert len(sent(cluster)) == 1


def test_keys_are_escaped_as_the_flow_escapes_them(cluster):
    odd = ["a/b", "..", ".", "ü ?%", "x.y~_-"]
    with client(cluster) as kiq:
        kiq.get("t", "k0")
        cluster.asked.clear()
        assert [kiq.get("t", k) for k in odd] == [{"odd": k} for k in odd]
    assert [path for _, path in sent(cluster)] == [f"/v1/tables/t/keys/{segment(k)}" for k in odd]


def test_a_forwarded_first_answer_marks_the_metadata_stale(cluster):
    async def run() -> list[str]:
        async with AsyncClient(NODES["n1"], transport=cluster.transport(), retry=FAST) as kiq:
            kiq._core.router._min_interval_s = 0
            await kiq.get("t", "k0")
            cluster.swapped, cluster.view_version = True, 2
            key = next(k for k in KEYS if cluster.active_url(k) == NODES["n2"])
            found = await kiq.lookup("t", key)  # asked of n1, served by n2
            assert found.served_by == "n2" and found.value == {"n": KEYS.index(key)}
            await kiq.get("t", key)
            return [node for node, _ in sent(cluster)][-2:]

    assert asyncio.run(run()) == ["n1", "n2"]
    assert len(cluster.calls("/v1/metadata")) == 2


def test_a_position_token_merged_once_is_merged_again_once_the_position_is_reset():
    position = SessionPosition()
    position.seen({"x-kiq-position": "t:0=5"})
    position.seen({"x-kiq-position": "t:1=3"})
    position.seen({"x-kiq-position": "t:0=5"})  # covered already
    assert position.token == "t:0=5,1=3"
    position.token = ""
    position.seen({"x-kiq-position": "t:0=5"})
    assert position.token == "t:0=5"
    position.token = "t:0=9"
    position.seen({"x-kiq-position": "t:1=3"})
    assert position.token == "t:0=9,1=3"

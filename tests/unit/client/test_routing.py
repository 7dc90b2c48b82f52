"""Where the client sends each call, and what it does when a node fails or has moved."""

from __future__ import annotations

import asyncio

import pytest

from kiq.client import (
    AsyncClient,
    BadRequest,
    Client,
    Forbidden,
    KeyNotFound,
    RetryPolicy,
    Unavailable,
    UnknownTable,
)
from kiq.client.errors import ClientError
from kiq.client.retry import NO_RETRY
from tests.unit.client.fake_cluster import NODES, FakeCluster

KEYS = [f"k{i}" for i in range(40)]
FAST = RetryPolicy(attempts=4, backoff_s=0.001, max_backoff_s=0.002)


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster(values={k: {"n": i} for i, k in enumerate(KEYS)})
    fake.raw["blob"] = b"\x00\xffraw"
    return fake


def client(cluster: FakeCluster, **kwargs) -> Client:
    options = {"retry": FAST, **kwargs}
    made = Client([NODES["n1"]], transport=cluster.transport(), **options)
    made._core.router._min_interval_s = 0  # refreshes as often as asked: the test's pace
    return made


def lookups(cluster: FakeCluster) -> list[str]:
    return [node for node, _, path in cluster.asked if "/keys/" in path]


def test_each_key_goes_straight_to_its_active_node(cluster):
    with client(cluster) as kiq:
        for i, key in enumerate(KEYS):
            assert kiq.get("t", key) == {"n": i}
        assert kiq.get("raw", "blob") == b"\x00\xffraw"
        found = kiq.lookup("t", "k3")
    expected = [cluster.active_url(k)[7:-5] for k in [*KEYS, "blob", "k3"]]
    assert lookups(cluster) == expected
    assert {"n1", "n2"} <= set(expected)
    assert len(cluster.calls("/v1/metadata")) == 1  # learned once, kept
    assert (found.offset, found.served_by, found.stale) == (7, expected[-1], False)


def test_a_node_down_the_standby_answers_and_the_metadata_is_read_again(cluster):
    with client(cluster) as kiq:
        kiq.get("t", "k0")
        cluster.down.add("n1")
        on_n1 = [k for k in KEYS if cluster.active_url(k) == NODES["n1"]]
        for key in on_n1:
            assert kiq.get("t", key) == {"n": KEYS.index(key)}
    assert lookups(cluster).count("n2") >= len(on_n1)
    assert len(cluster.calls("/v1/metadata")) >= 2


def test_an_answer_from_another_node_than_the_one_asked_refreshes_the_metadata(cluster):
    with client(cluster) as kiq:
        kiq.get("t", "k0")
        cluster.swapped, cluster.view_version = True, 2  # a failover the client did not see
        key = next(k for k in KEYS if cluster.active_url(k) == NODES["n2"])
        kiq.get("t", key)  # asked of n1, which forwarded: served by n2
        assert lookups(cluster)[-1] == "n1"
        kiq.get("t", key)
        assert lookups(cluster)[-1] == "n2"
        assert kiq._core.router.topology.view_version == 2


def test_errors_are_typed_and_not_retried(cluster):
    with client(cluster) as kiq:
        with pytest.raises(KeyNotFound) as missing:
            kiq.get("t", "nope")
        with pytest.raises(BadRequest):
            kiq.get("t", "bad key")
        with pytest.raises(UnknownTable):
            kiq.get("other", "k1")
    assert missing.value.status == 404 and missing.value.details["key"] == "nope"
    assert isinstance(missing.value, ClientError)
    assert len(lookups(cluster)) == 3


def test_a_503_is_retried_then_raised_as_unavailable(cluster):
    key = next(k for k in KEYS if cluster.active_url(k) == NODES["n1"])
    with client(cluster) as kiq:
        kiq.get("t", "k1")
        cluster.failing = {"n1": 1}
        assert kiq.get("t", key) == {"n": KEYS.index(key)}  # n1 failed once: n2 answered
        cluster.failing = {"n1": 100, "n2": 100}
        with pytest.raises(Unavailable) as gone:
            kiq.get("t", key)
    assert gone.value.retriable and gone.value.status == 503


def test_no_answer_at_all_is_unavailable_after_every_attempt(cluster):
    cluster.down = {"n1", "n2"}
    with client(cluster) as kiq, pytest.raises(Unavailable):
        kiq.get("t", "k1")
    assert len(lookups(cluster)) == FAST.attempts


def test_without_the_metadata_calls_go_to_any_node(cluster):
    cluster.refuse_metadata = True
    with client(cluster, token="tkn", retry=NO_RETRY) as kiq:
        assert [kiq.get("t", k) for k in KEYS[:6]] == [{"n": i} for i in range(6)]
        with pytest.raises(Forbidden):
            kiq.metadata()
    assert all(h["authorization"] == "Bearer tkn" for h in cluster.headers)
    assert len(cluster.calls("/v1/metadata")) == 2  # the refused refresh, then metadata()


def test_a_multiget_asks_each_owner_for_its_own_keys(cluster):
    with client(cluster) as kiq:
        many = kiq.multiget("t", [*KEYS, "nope", "k1"])
    assert many.found == {k: {"n": i} for i, k in enumerate(KEYS)}
    assert many.missing == ["nope"] and many.unavailable == []
    calls = cluster.calls("/multiget")
    assert sorted(node for node, _, _ in calls) == ["n1", "n2"]


def test_the_async_client_routes_and_fails_over_alike(cluster):
    async def run() -> list[object]:
        async with AsyncClient(NODES["n2"], transport=cluster.transport(), retry=FAST) as kiq:
            first = await asyncio.gather(*(kiq.get("t", k) for k in KEYS))
            cluster.down.add("n2")
            second = await asyncio.gather(*(kiq.get("t", k) for k in KEYS))
            many = await kiq.multiget("t", KEYS)
            return [first, second, many.found]

    first, second, found = asyncio.run(run())
    assert first == second == [{"n": i} for i in range(len(KEYS))]
    assert found == {k: {"n": i} for i, k in enumerate(KEYS)}
    assert len(cluster.calls("/v1/metadata")) <= 4  # concurrent refreshes are one flight


def test_the_backoff_grows_and_stays_bounded():
    policy = RetryPolicy(attempts=5, backoff_s=0.1, max_backoff_s=0.4)
    for attempt, bound in enumerate([0.1, 0.2, 0.4, 0.4, 0.4]):
        delays = [policy.delay(attempt) for _ in range(200)]
        assert min(delays) >= 0 and max(delays) <= bound
        assert max(delays) > bound / 2
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)

"""Limits against abuse: the rate limiter's buckets, and the limits a node's API enforces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq.api.limits import RateLimiter, caller_of
from kiq.peers.wire import INTERNAL_MULTIGET, Multiget, encode
from kiq.replicas import ReplicaState
from kiq.settings import LimitsSettings
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the buckets -----------------------------------------------------------------------


def test_a_burst_passes_then_one_request_per_interval():
    clock = Clock()
    limiter = RateLimiter(rate=10, burst=3, clock=clock)
    assert [limiter.retry_after("a") for _ in range(3)] == [0, 0, 0]
    wait = limiter.retry_after("a")
    assert wait == pytest.approx(0.1)  # the next token comes one interval later
    clock.now += 0.05
    assert limiter.retry_after("a") == pytest.approx(0.05)
    clock.now += 0.05
    assert limiter.retry_after("a") == 0
    assert limiter.retry_after("a") == pytest.approx(0.1)


def test_a_refused_request_takes_no_token():
    clock = Clock()
    limiter = RateLimiter(rate=1, burst=1, clock=clock)
    assert limiter.retry_after("a") == 0
    for _ in range(100):
        assert limiter.retry_after("a") > 0
    clock.now += 1.0
    assert limiter.retry_after("a") == 0


def test_the_bucket_refills_at_the_rate_up_to_the_burst():
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=4, clock=clock)
    for _ in range(4):
        assert limiter.retry_after("a") == 0
    clock.now += 1.0  # two tokens back
    assert [limiter.retry_after("a") == 0 for _ in range(3)] == [True, True, False]
    clock.now += 3600  # a long pause fills the bucket, no more
    assert sum(limiter.retry_after("a") == 0 for _ in range(10)) == 4


def test_callers_have_their_own_buckets():
    clock = Clock()
    limiter = RateLimiter(rate=1, burst=1, clock=clock)
    assert limiter.retry_after("a") == 0
    assert limiter.retry_after("a") > 0
    assert limiter.retry_after("b") == 0


def test_idle_callers_are_swept_and_the_table_stays_bounded():
    clock = Clock()
    limiter = RateLimiter(rate=1, burst=2, clients=100, clock=clock)
    for i in range(100):
        limiter.retry_after(f"c{i}")
    assert len(limiter) == 100
    for i in range(1000):  # all busy: the oldest go first, the bound holds
        limiter.retry_after(f"d{i}")
        assert len(limiter) <= 100
    assert limiter.retry_after("d999") == 0  # the newest kept its bucket (one token left)
    assert limiter.retry_after("d999") > 0
    clock.now += 60  # every bucket is full again: the next new caller sweeps them all
    limiter.retry_after("e")
    assert len(limiter) == 1


def test_an_idle_caller_comes_back_with_a_full_bucket():
    clock = Clock()
    limiter = RateLimiter(rate=1, burst=2, clients=2, clock=clock)
    limiter.retry_after("a")
    limiter.retry_after("a")
    clock.now += 60
    limiter.retry_after("b")
    limiter.retry_after("c")  # the table is full: "a", idle, is dropped
    assert limiter.retry_after("a") == 0 and limiter.retry_after("a") == 0


def test_limiter_of_settings():
    assert RateLimiter.of(LimitsSettings()) is None  # off by default
    limiter = RateLimiter.of(LimitsSettings(rate_limit=2.5))
    assert limiter is not None and limiter.capacity == pytest.approx(3 / 2.5)  # burst: ceil(2.5)
    assert LimitsSettings(rate_limit=5, rate_burst=20).burst == 20
    with pytest.raises(ValueError):
        RateLimiter(0, 1)


def test_the_caller_is_the_subject_else_the_address():
    assert caller_of({"client": ("10.0.0.7", 5555)}) == "10.0.0.7"
    assert caller_of({"client": ("10.0.0.7", 5555), "kiq.subject": "alice"}) == "alice"
    assert caller_of({"client": None}) == ""


def test_limits_as_a_child_nodes_environment():
    env = LimitsSettings(rate_limit=3, max_connections=10).as_env()
    assert env["KIQ_LIMITS_RATE_LIMIT"] == "3.0"
    assert env["KIQ_LIMITS_MAX_CONNECTIONS"] == "10"


# -- a node's API -------------------------------------------------------------------------

PARTITIONS = 2


def _node(tmp_path: Path, limits: LimitsSettings) -> LocalNode:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("prices", p) for p in range(PARTITIONS)])
    node = start_node(tmp_path, cluster, {"prices=prices,store=memory": PARTITIONS}, limits=limits)
    wait_until(serving(node.node, ReplicaState.ACTIVE), what="active replicas")
    node.put("prices", "AAPL", b'{"px":1}', 0)
    return node


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[LocalNode]:
    limits = LimitsSettings(rate_limit=1, rate_burst=2, max_body_bytes=1024, max_multiget_keys=3)
    node = _node(tmp_path, limits)
    yield node
    node.node.stop()


def run(node: LocalNode, method: str, target: str, body: bytes = b"", **kw):
    return asyncio.run(call(node.app, method, target, body, **kw))


def test_lookups_over_the_rate_are_429_with_retry_after(limited: LocalNode):
    statuses = [run(limited, "GET", "/v1/tables/prices/keys/AAPL").status for _ in range(3)]
    assert statuses == [200, 200, 429]
    r = run(limited, "GET", "/v1/tables/prices/keys/AAPL")
    assert r.status == 429 and r.headers["retry-after"] == "1"
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"] == "rate_limited" and r.json()["retry_after_s"] == 1


def test_other_routes_share_the_callers_bucket(limited: LocalNode):
    assert run(limited, "GET", "/v1/tables").status == 200
    assert run(limited, "GET", "/v1/tables/prices/keys/AAPL").status == 200
    r = run(limited, "GET", "/v1/tables/prices/range")
    assert r.status == 429 and "retry-after" in r.headers


def test_nodes_and_probes_are_never_limited(limited: LocalNode):
    batch = encode(Multiget("prices", [b"AAPL"]))
    for _ in range(10):
        assert run(limited, "POST", INTERNAL_MULTIGET, batch).status == 200
        assert run(limited, "GET", "/v1/health/live").status == 200


def test_another_subject_has_its_own_bucket(limited: LocalNode):
    for _ in range(3):
        run(limited, "GET", "/v1/tables")
    assert run(limited, "GET", "/v1/tables").status == 429

    async def as_bob() -> int:
        sent: list[dict] = []
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/v1/tables",
            "raw_path": b"/v1/tables",
            "query_string": b"",
            "headers": [],
            "client": ("127.0.0.1", 1),
            "kiq.subject": "bob",
        }

        async def send(message: dict) -> None:
            sent.append(message)

        await limited.app(scope, None, send)
        return int(sent[0]["status"])

    assert asyncio.run(as_bob()) == 200


def test_a_body_over_the_limit_is_413(limited: LocalNode):
    big = orjson.dumps({"keys": ["x" * 300] * 4})
    r = run(limited, "POST", "/v1/tables/prices/multiget", big)
    assert r.status == 413 and r.json()["error"] == "too_large"


def test_more_keys_than_the_limit_is_413(limited: LocalNode):
    r = run(limited, "POST", "/v1/tables/prices/multiget", b'{"keys": ["a","b","c","d"]}')
    assert r.status == 413 and r.json()["count"] == 4
    r = run(limited, "POST", "/v1/tables/prices/multiget", b'{"keys": ["AAPL","b","c"]}')
    assert r.status == 200 and r.json()["missing"] == ["b", "c"]


def test_without_a_rate_limit_nothing_is_refused(tmp_path: Path):
    node = _node(tmp_path, LimitsSettings())
    try:
        assert node.app.limiter is None
        assert node.app._lookup == node.app.lookups.get  # the lookup path, unwrapped
        for _ in range(50):
            assert run(node, "GET", "/v1/tables/prices/keys/AAPL").status == 200
    finally:
        node.node.stop()

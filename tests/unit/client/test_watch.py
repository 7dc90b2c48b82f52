"""A watch across lost connections: resumed with Last-Event-ID, on another replica when
one fails, after a slow subscriber is dropped; given up only when no node streams."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from kiq.client import AsyncClient, Change, Client, RetryPolicy, Unavailable, UnknownTable
from kiq.client.router import Router
from kiq.client.sse import Event
from kiq.client.watch import WatchSession
from kiq.partitioning import partition_for
from tests.unit.client.fake_cluster import NODES, PARTITIONS, FakeCluster, event_stream

KEY = next(f"w{i}" for i in itertools.count() if partition_for(f"w{i}", PARTITIONS) % 2 == 0)
SSE = {"content-type": "text/event-stream"}


def event(id_: str, kind: str, value: object, snapshot: bool = False) -> bytes:
    data = {
        "table": "t",
        "key": KEY,
        "partition": partition_for(KEY, PARTITIONS),
        "offset": int(id_),
        "value": value,
        "served_by": "n1",
        "stale": False,
        "lag": 0,
        "snapshot": snapshot,
    }
    return f"id: {id_}\nevent: {kind}\ndata: {orjson.dumps(data).decode()}\n\n".encode()


def scripted(cluster: FakeCluster, node: str, bodies: list[list[bytes] | Exception], aio=False):
    """``node`` answers its watch connections with ``bodies`` in turn: chunks then a lost
    connection, or an exception (no connection at all)."""
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        body = bodies.pop(0)
        if isinstance(body, Exception):
            raise body
        lost = httpx.ReadError("connection lost")
        stream = _async(body, lost) if aio else event_stream(body, lost)
        return httpx.Response(200, headers=SSE, content=stream)

    cluster.streams[node] = answer
    return seen


async def _async(chunks: list[bytes], then: Exception) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
    raise then


def script(cluster: FakeCluster, aio: bool = False) -> tuple[list, list]:
    on_n1 = scripted(
        cluster,
        "n1",
        [
            [
                b": hb\n\n",
                event("1", "absent", None, snapshot=True)[:30],
                event("1", "absent", None, snapshot=True)[30:] + event("2", "value", {"v": 2}),
            ],
            [event("4", "delete", None) + b'id: 5\nevent: value\ndata: {"tru'],  # cut off
        ],
        aio,
    )
    on_n2 = scripted(
        cluster,
        "n2",
        [
            [event("3", "value", {"v": 3}) + b'event: dropped\ndata: {"reason": "slow"}\n\n'],
            [event("5", "expire", None)],
        ],
        aio,
    )
    return on_n1, on_n2


def check(changes: list[Change], on_n1: list, on_n2: list) -> None:
    assert [(c.kind, c.value, c.id, c.snapshot) for c in changes] == [
        ("absent", None, "1", True),
        ("value", {"v": 2}, "2", False),
        ("value", {"v": 3}, "3", False),
        ("delete", None, "4", False),
        ("expire", None, "5", False),
    ]
    assert changes[0].key == KEY and changes[0].offset == 1 and changes[0].table == "t"
    # to the key's active n1 first; lost: to n2, the standby; dropped by n2: back to the
    # active; lost again: to the standby
    assert [h.get("last-event-id") for h in on_n1] == [None, "3"]
    assert [h.get("last-event-id") for h in on_n2] == ["2", "4"]
    assert all(h["accept"] == "text/event-stream" for h in on_n1 + on_n2)


def test_a_watch_resumes_after_each_lost_connection_without_a_gap():
    cluster = FakeCluster()
    on_n1, on_n2 = script(cluster)
    with Client([NODES["n2"]], transport=cluster.transport()) as kiq:
        changes = list(itertools.islice(kiq.watch("t", key=KEY), 5))
    check(changes, on_n1, on_n2)


def test_the_async_watch_resumes_alike():
    cluster = FakeCluster()
    on_n1, on_n2 = script(cluster, aio=True)

    async def run() -> list[Change]:
        out: list[Change] = []
        async with AsyncClient([NODES["n2"]], transport=cluster.transport()) as kiq:
            async for change in kiq.watch("t", key=KEY):
                out.append(change)
                if len(out) == 5:
                    break
        return out

    check(asyncio.run(run()), on_n1, on_n2)


def test_an_unknown_table_is_raised_at_once():
    cluster = FakeCluster()
    with Client([NODES["n1"]], transport=cluster.transport()) as kiq, pytest.raises(UnknownTable):
        next(kiq.watch("nope", key="a"))


def test_no_node_streaming_for_give_up_s_is_unavailable():
    cluster = FakeCluster(down={"n1", "n2"})
    retry = RetryPolicy(attempts=1)
    kiq = Client([NODES["n1"]], transport=cluster.transport(), retry=retry)
    with kiq, pytest.raises(Unavailable, match="no node streamed"):
        next(kiq.watch("t", prefix="a", give_up_s=0.3))
    assert len(cluster.calls("/watch")) >= 2


def test_what_a_watch_asks_for():
    router = Router([NODES["n1"]])
    single = WatchSession(router, "t", key="a/b")
    assert single.path == "/v1/tables/t/keys/a%2Fb/watch" and single.params is None
    several = WatchSession(router, "t", keys=["a", "b"])
    assert (several.path, several.params) == ("/v1/tables/t/watch", {"keys": "a,b"})
    prefix = WatchSession(router, "t", prefix="AA")
    assert prefix.params == {"prefix": "AA"}
    for wrong in ({}, {"key": "a", "prefix": "b"}, {"keys": []}):
        with pytest.raises(ValueError):
            WatchSession(router, "t", **wrong)
    assert single.take(Event("hello", "{}", "9")) is None  # a kind it does not know: skipped
    assert single.last_id == "9"

"""Coalescing lookups into internal batches (``Peers.forward`` to one target), against real
loopback servers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from kiq.peers import FORWARDED, LookupResult, Outcome, Peers
from kiq.peers.wire import INTERNAL_LOOKUPS, MSGPACK, Lookup, decode_lookups, encode
from kiq.routing import Router
from tests.unit.peers.servers import Answer, Request, serving


@dataclass(frozen=True)
class Batch:
    path: str
    headers: dict[str, str]  # names lower-cased
    items: list[Lookup]


def answering(status: int, batches: list[Batch]) -> Callable[[Request], Awaitable[Answer]]:
    """Echoes each item: found, with the key reversed as the value; 'missing*' keys are 404."""

    async def handler(request: Request) -> Answer:
        items = decode_lookups(request.body)
        batches.append(Batch(request.path, request.headers, items))
        if any(item.wait_ms for item in items):
            await asyncio.sleep(max(item.wait_ms for item in items) / 1000)
        results = [
            LookupResult(Outcome.MISSING, 1, 0, False, b"n2")
            if item.key.startswith(b"missing")
            else LookupResult(Outcome.FOUND, 3, 5, True, b"n2", 42, item.key[::-1])
            for item in items
        ]
        return Answer(status, encode(results), [("content-type", MSGPACK)])

    return handler


def with_servers(
    scenario: Callable[[list[str], Peers], Awaitable[None]],
    count: int = 1,
    router: Router | None = None,
    status: int = 200,
    timeout_ms: int = 2000,
    max_in_flight: int = 2,
) -> list[list[Batch]]:
    """Run ``scenario(urls, peers)`` against ``count`` fresh servers; their batches seen."""

    async def main() -> list[list[Batch]]:
        seen: list[list[Batch]] = []
        urls: list[str] = []
        async with AsyncExitStack() as stack:
            for _ in range(count):
                batches: list[Batch] = []
                seen.append(batches)
                server = await stack.enter_async_context(serving(answering(status, batches)))
                urls.append(server.url)
            peers = Peers(
                "node-7",
                router or Router("node-7"),
                timeout_ms,
                max_in_flight=max_in_flight,
                channels=False,  # each batch an HTTP request these servers see
            )
            stack.callback(peers.close)
            await scenario(urls, peers)
        return seen

    return asyncio.run(main())


def lookup(
    peers: Peers,
    url: str,
    key: bytes,
    max_lag: int | None = None,
    min_offset: int | None = None,
    wait_ms: int = 0,
    auth: str | None = None,
) -> Awaitable[LookupResult]:
    """One target, no hedge: the lookup goes to the batcher and its answer comes back."""
    return peers.forward([url], 0, "users", key, max_lag, min_offset, wait_ms, auth)


def _get(peers: Peers, url: str, key: str, auth: str | None = None) -> Awaitable[LookupResult]:
    return lookup(peers, url, key.encode(), auth=auth)


def test_concurrent_lookups_to_one_node_share_one_request():
    got: list[LookupResult] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        got.extend(await asyncio.gather(*(_get(peers, urls[0], f"k{i}") for i in range(100))))

    ((batch,),) = with_servers(scenario)
    assert batch.path == INTERNAL_LOOKUPS
    assert [item.key for item in batch.items] == [f"k{i}".encode() for i in range(100)]
    assert all(item.table == "users" and item.max_lag is None for item in batch.items)
    assert batch.headers[FORWARDED] == "node-7"
    assert batch.headers["content-type"] == MSGPACK
    assert "x-kiq-principal" not in batch.headers
    # each caller gets its own item's answer
    assert [r.value for r in got] == [f"k{i}".encode()[::-1] for i in range(100)]
    assert got[0] == LookupResult(Outcome.FOUND, 3, 5, True, b"n2", 42, b"0k")


def test_lookups_to_two_nodes_go_in_two_requests():
    got: list[LookupResult] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        calls = [_get(peers, urls[i % 2], f"k{i}") for i in range(10)]
        calls.append(_get(peers, urls[1], "missing1"))
        got.extend(await asyncio.gather(*calls))

    first, second = with_servers(scenario, count=2)
    assert len(first) == 1 and len(second) == 1
    assert [i.key for i in first[0].items] == [b"k0", b"k2", b"k4", b"k6", b"k8"]
    assert [i.key for i in second[0].items] == [b"k1", b"k3", b"k5", b"k7", b"k9", b"missing1"]
    assert [r.outcome for r in got] == [Outcome.FOUND] * 10 + [Outcome.MISSING]


def test_the_caller_is_carried_and_keeps_batches_apart():
    async def scenario(urls: list[str], peers: Peers) -> None:
        await asyncio.gather(
            _get(peers, urls[0], "a1", "Bearer alice"),
            _get(peers, urls[0], "b1", "Bearer bob"),
            _get(peers, urls[0], "a2", "Bearer alice"),
        )

    ((*batches,),) = with_servers(scenario)
    by_auth = {b.headers["x-kiq-principal"]: [i.key for i in b.items] for b in batches}
    assert by_auth == {"Bearer alice": [b"a1", b"a2"], "Bearer bob": [b"b1"]}
    assert all(b.headers[FORWARDED] == "node-7" for b in batches)


def test_a_full_batch_goes_out_and_the_rest_follow_in_more_requests():
    async def scenario(urls: list[str], peers: Peers) -> None:
        results = await asyncio.gather(*(_get(peers, urls[0], f"k{i}") for i in range(600)))
        assert [r.value for r in results] == [f"k{i}".encode()[::-1] for i in range(600)]

    (batches,) = with_servers(scenario)
    assert sorted(len(b.items) for b in batches) == [88, 256, 256]
    keys = [i.key for b in batches for i in b.items]
    assert sorted(keys) == sorted(f"k{i}".encode() for i in range(600))


def test_lookups_in_different_ticks_are_not_held_back():
    async def scenario(urls: list[str], peers: Peers) -> None:
        for i in range(3):
            assert (await _get(peers, urls[0], f"k{i}")).outcome is Outcome.FOUND

    (batches,) = with_servers(scenario)
    assert [[i.key for i in b.items] for b in batches] == [[b"k0"], [b"k1"], [b"k2"]]


def test_waiting_lookups_travel_apart_and_stretch_the_timeout():
    got: dict[str, tuple[Outcome, float]] = {}

    async def one(
        peers: Peers, url: str, key: bytes, max_lag: int | None, min_offset: int | None, wait: int
    ) -> None:
        start = time.monotonic()
        result = await lookup(peers, url, key, max_lag, min_offset, wait)
        got[key.decode()] = (result.outcome, time.monotonic() - start)

    async def scenario(urls: list[str], peers: Peers) -> None:
        await asyncio.gather(
            one(peers, urls[0], b"k1", 10, 1234, 300),
            one(peers, urls[0], b"k2", None, None, 0),
            one(peers, urls[0], b"k3", None, 99, 0),  # min_offset, but no wait: no wait
        )

    # The server waits for the largest wait_ms (300 ms), longer than the 100 ms timeout.
    ((*batches,),) = with_servers(scenario, timeout_ms=100)
    assert sorted((b.items for b in batches), key=len) == [
        [Lookup("users", b"k1", 10, 1234, 300)],
        [Lookup("users", b"k2"), Lookup("users", b"k3", None, 99, 0)],
    ]
    assert {k: outcome for k, (outcome, _) in got.items()} == dict.fromkeys(
        ["k1", "k2", "k3"], Outcome.FOUND
    )
    assert got["k1"][1] >= 0.3
    assert got["k2"][1] < 0.2  # not held back by k1's wait


class CountingRouter(Router):
    def __init__(self) -> None:
        super().__init__("node-7")
        self.failures: list[str] = []
        self.successes: list[str] = []

    def failed(self, url: str) -> None:
        self.failures.append(url)
        super().failed(url)

    def succeeded(self, url: str) -> None:
        self.successes.append(url)
        super().succeeded(url)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_node_fails_every_item_quickly_and_the_router_hears_once():
    router = CountingRouter()
    dead = f"http://127.0.0.1:{_closed_port()}"
    got: list[LookupResult] = []
    elapsed: list[float] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        start = time.monotonic()
        got.extend(await asyncio.gather(*(_get(peers, dead, f"k{i}") for i in range(50))))
        elapsed.append(time.monotonic() - start)

    with_servers(scenario, count=0, router=router)
    assert elapsed[0] < 1.0
    assert len(got) == 50
    assert all(r.outcome is Outcome.FAILED for r in got)
    assert dead in got[0].reason
    assert router.failures == [dead]
    assert router.successes == []


def test_a_refused_batch_fails_every_item_but_the_node_is_not_down():
    router = CountingRouter()
    got: list[LookupResult] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        got.extend(await asyncio.gather(*(_get(peers, urls[0], f"k{i}") for i in range(5))))

    with_servers(scenario, router=router, status=404)
    assert [r.outcome for r in got] == [Outcome.FAILED] * 5
    assert "answered 404" in got[0].reason
    assert router.failures == []
    assert len(router.successes) == 1


def test_a_caller_that_goes_away_does_not_disturb_the_others():
    got: list[LookupResult] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        tasks = [asyncio.ensure_future(_get(peers, urls[0], f"k{i}")) for i in range(3)]
        await asyncio.sleep(0)
        tasks[1].cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[1], asyncio.CancelledError)
        got.extend(r for r in done if isinstance(r, LookupResult))

    ((batch,),) = with_servers(scenario)
    assert len(batch.items) == 3
    assert [r.value for r in got] == [b"0k", b"2k"]


def test_lookups_gather_while_a_batch_is_in_flight():
    sizes: list[int] = []

    async def scenario(urls: list[str], peers: Peers) -> None:
        # min_offset + wait_ms: the test server holds each batch for wait_ms.
        first = asyncio.ensure_future(lookup(peers, urls[0], b"k0", None, 1, 200))
        await asyncio.sleep(0.05)  # k0's batch is out
        later = []
        for i in range(1, 6):  # each in a tick of its own: alone, each would be a batch
            key = f"k{i}".encode()
            call = lookup(peers, urls[0], key, None, 1, 200)
            later.append(asyncio.ensure_future(call))
            await asyncio.sleep(0.005)
        results = await asyncio.gather(first, *later)
        assert [r.value for r in results] == [f"k{i}".encode()[::-1] for i in range(6)]
        assert peers._batcher._slots == {}  # idle again: nothing kept per slot

    (batches,) = with_servers(scenario, max_in_flight=1)
    sizes = [len(b.items) for b in batches]
    assert sizes == [1, 5]

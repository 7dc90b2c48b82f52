"""Lookup batches over a peer's channel (``peers/channel.py`` → ``peers/channel_server.py``): many
batches on one WebSocket, answers paired by id, signed and sealed as requests are, and
HTTP for a peer that serves no channel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from kiq.api.auth import Access, caller
from kiq.api.errors import NotHere, error_response
from kiq.peers import LookupResult, Outcome, Peers, channel_server
from kiq.peers import channel as channel_module
from kiq.peers.channel import REFUSED_RETRY_S, Channels
from kiq.peers.channel_server import LookupChannels, Read
from kiq.peers.frames import FrameError, FrameReader, client_frame
from kiq.peers.wire import (
    CHANNEL_MAX_ROWS,
    INTERNAL_CHANNEL,
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    INTERNAL_SCAN,
    INTERNAL_TOP_MANY,
    PACKED_PROTOCOL,
    READS_PROTOCOL,
    ChannelAnswer,
    ChannelAsk,
    Lookup,
    Scan,
    ScanResult,
    Source,
    Top,
    TopMany,
    TopResults,
    decode_lookups,
    decode_scan,
    decode_top_many,
    encode,
)
from kiq.routing import Router
from kiq.security import CLUSTER_HEADER, ClusterKey
from tests.unit.peers.servers import Answer, Request, serving
from tests.unit.peers.ws_servers import WsServer, serving_websockets

SECRET = b"s" * 32


class Owner:
    """``Lookups`` as the channel uses it: each key found with its value reversed; a key
    asked with ``wait_ms`` answered that much later."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[Lookup], Any]] = []
        self.recorded = 0

    def internal_now(
        self, body: bytes, caller: Any = None
    ) -> tuple[list[LookupResult], list[Coroutine[Any, Any, None]]]:
        items = decode_lookups(body)
        self.batches.append((items, caller))
        results = [LookupResult(Outcome.FOUND, 3, 0, False, b"n2", 7, i.key[::-1]) for i in items]
        waiting = [self._later(i, item.wait_ms) for i, item in enumerate(items) if item.wait_ms]
        return results, waiting

    async def _later(self, index: int, wait_ms: int) -> None:
        await asyncio.sleep(wait_ms / 1000)

    def record_internal(self, seconds: float) -> None:
        self.recorded += 1


class CountingRouter(Router):
    def __init__(self) -> None:
        super().__init__("n1")
        self.failures: list[str] = []

    def failed(self, url: str) -> None:
        self.failures.append(url)
        super().failed(url)


def run(
    scenario: Callable[[WsServer, Peers], Awaitable[None]],
    owner: Owner | None = None,
    cluster: ClusterKey | None = None,
    router: Router | None = None,
    timeout_ms: int = 2000,
    app: Callable[..., Awaitable[None]] | None = None,
    reads: dict[str, Read] | None = None,
    http: Callable[[Request], Awaitable[Answer]] | None = None,
    record: Callable[[str, int, float], None] | None = None,
) -> WsServer:
    owner = owner or Owner()
    channels: list[LookupChannels] = []

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await (app or channels[0])(scope, receive, send)

    async def hello(request: Request) -> Answer:  # a member's proof, as the node gives it
        if http is not None and request.path != INTERNAL_HELLO:
            return await http(request)
        assert cluster is not None and request.path == INTERNAL_HELLO
        credential = request.headers[CLUSTER_HEADER]
        return Answer(200, cluster.seal(credential, request.body))

    async def main() -> WsServer:
        async with serving_websockets(asgi, hello) as server:
            access = Access(None, cluster, server.url) if cluster is not None else None
            channels.append(
                LookupChannels(owner, access, caller, error_response, reads, record)  # type: ignore[arg-type]
            )
            peers = Peers("n1", router or Router("n1"), timeout_ms, cluster)
            try:
                await scenario(server, peers)
            finally:
                peers.close()
        return server

    return asyncio.run(main())


def forward(peers: Peers, url: str, key: bytes, **kw: Any) -> Awaitable[LookupResult]:
    return peers.forward(
        [url], 0, "t", key, None, kw.get("min_offset"), kw.get("wait_ms", 0), kw.get("caller")
    )


def test_batches_share_one_channel_and_answers_pair_by_id_in_any_order():
    owner = Owner()
    got: list[LookupResult] = []

    async def scenario(server: WsServer, peers: Peers) -> None:
        slow = asyncio.ensure_future(forward(peers, server.url, b"slow", min_offset=5, wait_ms=200))
        await asyncio.sleep(0.05)  # the slow batch is out, unanswered
        for _ in range(3):
            got.extend(
                await asyncio.gather(*(forward(peers, server.url, b"k%d" % i) for i in range(5)))
            )
        assert not slow.done()  # the later batches were not held behind it
        got.append(await slow)

    server = run(scenario, owner)
    assert len(server.upgrades) == 1  # one channel for every batch
    assert server.messages == len(owner.batches) == 4 == owner.recorded
    assert [r.value for r in got] == [b"%d" % i + b"k" for i in range(5)] * 3 + [b"wols"]
    assert all(r.outcome is Outcome.FOUND and r.served_by == b"n2" for r in got)


def test_a_signed_channel_carries_each_batch_s_credential_and_its_caller():
    owner = Owner()

    async def scenario(server: WsServer, peers: Peers) -> None:
        result = await forward(peers, server.url, b"k", caller="alice-statement")
        assert result.outcome is Outcome.FOUND and result.value == b"k"

    server = run(scenario, owner, cluster=ClusterKey(SECRET))
    assert CLUSTER_HEADER in server.upgrades[0]  # the upgrade is signed too
    assert owner.batches[0][0][0].key == b"k"  # verified (the owner saw it), then sealed


def test_a_peer_without_channels_gets_http_requests_and_is_not_asked_again():
    seen: list[Request] = []

    async def old_node(request: Request) -> Answer:
        seen.append(request)
        if request.path != INTERNAL_LOOKUPS:
            return Answer(404, b'{"error":"no_route"}')
        items = decode_lookups(request.body)
        return Answer(200, encode([LookupResult(Outcome.MISSING, 1) for _ in items]))

    async def main() -> None:
        async with serving(old_node) as server:
            peers = Peers("n1", Router("n1"), 1000)
            try:
                for _ in range(3):
                    result = await forward(peers, server.url, b"k")
                    assert result.outcome is Outcome.MISSING
            finally:
                peers.close()

    asyncio.run(main())
    assert [r.path for r in seen] == [INTERNAL_CHANNEL] + [INTERNAL_LOOKUPS] * 3
    assert seen[0].method == "GET" and seen[0].headers["upgrade"] == "websocket"


def test_a_channel_that_closes_fails_its_batches_and_the_next_batch_reopens_it():
    router = CountingRouter()

    async def hang_up(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await receive()  # the first ask: gone with it

    async def scenario(server: WsServer, peers: Peers) -> None:
        for _ in range(2):
            result = await forward(peers, server.url, b"k")
            assert result.outcome is Outcome.FAILED and "channel" in result.reason

    server = run(scenario, router=router, app=hang_up)
    assert len(server.upgrades) == 2
    assert router.failures == [server.url] * 2


def test_a_silent_channel_times_out_and_is_closed():
    async def silent(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] == "websocket.receive":
            pass  # never answers

    async def scenario(server: WsServer, peers: Peers) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await forward(peers, server.url, b"k")
        assert result.outcome is Outcome.FAILED and "no answer within 0.300s" in result.reason
        assert loop.time() - started < 1.5
        await forward(peers, server.url, b"k")

    server = run(scenario, timeout_ms=300, app=silent)
    assert len(server.upgrades) == 2  # nothing heard since the ask: a new channel


def test_a_connection_that_breaks_fails_the_batch_in_flight_and_the_queued_one_at_once():
    # A peer killed (-9): its socket closes with no close frame.
    async def killed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await receive()  # the first ask
        await asyncio.sleep(0.1)  # the next batch queues behind it meanwhile

    async def scenario(server: WsServer, peers: Peers) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        first = asyncio.ensure_future(forward(peers, server.url, b"a"))
        await asyncio.sleep(0.02)
        second = asyncio.ensure_future(forward(peers, server.url, b"b"))
        for result in await asyncio.gather(first, second):
            assert result.outcome is Outcome.FAILED and "channel" in result.reason
        assert loop.time() - started < 1.0  # not the 5 s timeout

    server = run(scenario, timeout_ms=5000, app=killed)
    assert len(server.upgrades) == 2  # the queued batch went on a new channel


def test_a_close_frame_fails_the_batch_in_flight_at_once_with_its_code():
    async def closes(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        await send({"type": "websocket.close", "code": 1011})

    async def scenario(server: WsServer, peers: Peers) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await forward(peers, server.url, b"k")
        assert result.outcome is Outcome.FAILED and "close code 1011" in result.reason
        assert loop.time() - started < 1.0
        await forward(peers, server.url, b"k")

    server = run(scenario, timeout_ms=5000, app=closes)
    assert len(server.upgrades) == 2  # not going away: the next batch opens a channel


def test_a_node_going_away_fails_the_batch_in_flight_at_once_and_gets_http_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stopping node closes its channels (1001) before its server stops: the batch in
    flight there fails at once, not after its timeout, and its peer sends HTTP for
    ``AWAY_RETRY_S``; a channel opened after that, while the node still stops, is closed
    the same way."""
    monkeypatch.setattr(channel_module, "AWAY_RETRY_S", 0.2)
    owner = Owner()
    over_http: list[list[Lookup]] = []

    async def node_http(request: Request) -> Answer:
        assert request.path == INTERNAL_LOOKUPS
        over_http.append(decode_lookups(request.body))
        return Answer(200, encode([LookupResult(Outcome.MISSING, 1) for _ in over_http[-1]]))

    async def main() -> WsServer:
        lookup_channels = LookupChannels(owner, None, caller, error_response)  # type: ignore[arg-type]
        async with serving_websockets(lookup_channels, node_http) as server:
            peers = Peers("n1", Router("n1"), 2000)
            loop = asyncio.get_running_loop()
            try:
                assert (await forward(peers, server.url, b"k")).outcome is Outcome.FOUND
                waiting = asyncio.ensure_future(
                    forward(peers, server.url, b"slow", min_offset=5, wait_ms=3000)
                )
                await asyncio.sleep(0.05)  # out, waiting on the owner
                started = loop.time()
                await lookup_channels.going_away(1.0)
                result = await waiting
                assert result.outcome is Outcome.FAILED and "stopping" in result.reason
                assert loop.time() - started < 0.5  # not the 5 s it may wait
                assert (await forward(peers, server.url, b"k")).outcome is Outcome.MISSING
                assert len(over_http) == 1
                await asyncio.sleep(0.25)
                # A channel again, closed as it opens: that batch goes over HTTP, or
                # fails at once when the close came after it went; the next one HTTP.
                result = await forward(peers, server.url, b"k")
                assert result.outcome in (Outcome.MISSING, Outcome.FAILED)
                assert (await forward(peers, server.url, b"k")).outcome is Outcome.MISSING
                assert len(over_http) in (2, 3)
            finally:
                peers.close()
        return server

    server = asyncio.run(main())
    assert len(server.upgrades) == 2


class ChannelNode:
    """``KiqApp`` as far as a peer's channel and ``stop_servers`` go; ``accepted`` is told
    the subprotocol each channel was accepted with."""

    def __init__(
        self, channels: LookupChannels, accepted: Callable[[str | None], None] | None = None
    ) -> None:
        self.channels = channels
        self.accepted = accepted

    def end_streams(self) -> None:
        pass

    async def close_channels(self, timeout_s: float) -> None:
        await self.channels.going_away(timeout_s)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def spied(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.accept" and self.accepted is not None:
                self.accepted(message.get("subprotocol"))
            await send(message)

        if scope["type"] == "websocket":
            await self.channels(scope, receive, spied)
        elif scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})


async def granian_serving(node: ChannelNode) -> tuple[Any, asyncio.Future[None], str]:
    """``node`` served by a real granian server on a free port, once it listens: the
    server, its serving future and its URL."""
    from kiq.runtime.ports import free_port
    from kiq.settings import LimitsSettings
    from kiq.workers.server import http_server

    port = free_port()
    server = http_server(node, "127.0.0.1", port, LimitsSettings())
    serving = asyncio.ensure_future(server.serve())
    for _ in range(100):  # listening?
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            break
        except OSError:
            await asyncio.sleep(0.05)
    return server, serving, f"http://127.0.0.1:{port}"


def test_a_stopping_granian_node_closes_its_channels_first_and_ends_at_once() -> None:
    """``kiq serve``'s stop on a real granian server. Once told to stop, granian sends
    nothing the application sends on a websocket and waits for the peer to hang up, so
    a batch in flight on a channel would wait out its timeout (and the node with it)."""
    from kiq.cli.serve import stop_servers

    lookup_channels = LookupChannels(Owner(), None, caller, error_response)  # type: ignore[arg-type]

    async def main() -> None:
        node = ChannelNode(lookup_channels)
        server, serving, url = await granian_serving(node)
        loop = asyncio.get_running_loop()
        peers = Peers("n1", Router("n1"), 5000)
        try:
            assert (await forward(peers, url, b"k")).outcome is Outcome.FOUND
            waiting = asyncio.ensure_future(forward(peers, url, b"s", min_offset=5, wait_ms=3000))
            await asyncio.sleep(0.1)
            started = loop.time()
            await stop_servers(node, [server])
            result = await waiting
            assert result.outcome is Outcome.FAILED and "stopping" in result.reason
            assert loop.time() - started < 1.0
            await asyncio.wait_for(serving, 2.0)  # no channel left open to wait for
        finally:
            peers.close()
            if not serving.done():
                server.stop()
                await serving

    asyncio.run(main())


# -- the receiving end alone --------------------------------------------------------------


def answer_to(channels: LookupChannels, ask: ChannelAsk) -> tuple[int, int, bytes]:
    async def main() -> ChannelAnswer | None:
        return channels._answer_now(ask, set(), None)  # type: ignore[arg-type]

    answer = asyncio.run(main())
    assert answer is not None
    return answer.id, answer.status, answer.body


def test_an_ask_without_a_valid_credential_is_refused_and_the_owner_not_asked():
    owner = Owner()
    key = ClusterKey(SECRET)
    url = "http://127.0.0.1:1"
    channels = LookupChannels(owner, Access(None, key, url), caller, error_response)  # type: ignore[arg-type]
    body = encode([Lookup("t", b"k")])
    forged = key.sign("http://127.0.0.1:2", "POST", INTERNAL_LOOKUPS, body)  # another node's
    assert answer_to(channels, ChannelAsk(9, body, forged))[:2] == (9, 403)
    assert answer_to(channels, ChannelAsk(10, body))[:2] == (10, 403)
    assert owner.batches == []
    good = key.sign(url, "POST", INTERNAL_LOOKUPS, body)
    ask_id, status, sealed = answer_to(channels, ChannelAsk(11, body, good))
    assert (ask_id, status) == (11, 200)
    assert key.open(good, sealed)  # sealed for that credential
    with pytest.raises(Exception, match="already used"):
        key.verify(url, "POST", INTERNAL_LOOKUPS, body, good)  # and it cannot be replayed


def test_frames_round_trip_masked_split_anywhere():
    payload = bytes(range(256)) * 300  # a 64-bit length
    reader = FrameReader(1 << 20)
    frame = client_frame(payload)
    assert frame[1] & 0x80  # masked
    # a server frame is the same, unmasked: build it from the masked one
    unmasked = bytes((frame[0], 127)) + frame[2:10] + payload
    out = []
    for i in range(0, len(unmasked), 1000):
        out += reader.feed(unmasked[i : i + 1000])
    assert out == [(0x2, payload)]


def test_fragments_join_controls_pass_between_and_bad_frames_are_refused():
    reader = FrameReader(100)
    first = bytes((0x02, 3)) + b"abc"  # binary, not final
    ping = bytes((0x89, 1)) + b"p"
    last = bytes((0x80, 2)) + b"de"  # continuation, final
    assert reader.feed(first + ping + last[:1]) == [(0x9, b"p")]
    assert reader.feed(last[1:]) == [(0x2, b"abcde")]
    for bad, why in [
        (bytes((0x82, 0x81)) + b"\0\0\0\0x", "masked"),
        (bytes((0x80, 1)) + b"x", "no message begun"),
        (bytes((0x82, 126)) + (200).to_bytes(2, "big"), "more than 100"),
    ]:
        with pytest.raises(FrameError, match=why):
            FrameReader(100).feed(bad)


def test_a_refusal_sends_the_peer_http_for_a_while_then_asks_again(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(channel_module.time, "monotonic", lambda: now[0])
    channels = Channels()

    async def refused() -> None:
        channels._refused_until["http://x"] = now[0] + REFUSED_RETRY_S

    asyncio.run(refused())
    assert not channels.usable("http://x") and channels.usable("http://y")
    now[0] += REFUSED_RETRY_S + 1
    assert channels.usable("http://x")


def _page(scan: Scan, via: str) -> bytes:
    """A scan's answer: ``limit`` rows named for the transport that carried it."""
    rows = [(b"%s-%d" % (via.encode(), i), b"v") for i in range(min(scan.limit, 3))]
    return encode(ScanResult(rows, Source(scan.partition, served_by=b"n2")))


def test_small_reads_go_over_the_channel_and_a_big_page_over_http():
    asked: list[tuple[str, Any]] = []
    counted: list[tuple[str, int]] = []

    async def scan_here(body: bytes, caller: Any) -> bytes:
        asked.append(("channel", caller))
        return _page(decode_scan(body), "channel")

    async def over_http(request: Request) -> Answer:
        asked.append(("http", request.path))
        return Answer(200, _page(decode_scan(request.body), "http"))

    async def scenario(server: WsServer, peers: Peers) -> None:
        small = await peers.scan(server.url, "t", 1, None, None, 100, "alice-statement")
        assert [k for k, _ in small.items] == [b"channel-0", b"channel-1", b"channel-2"]
        big = await peers.scan(server.url, "t", 1, None, None, CHANNEL_MAX_ROWS + 1, None)
        assert big.items[0][0] == b"http-0"

    server = run(
        scenario,
        reads={INTERNAL_SCAN: scan_here},
        http=over_http,
        record=lambda path, status, _: counted.append((path, status)),
    )
    assert server.upgrades[0]["sec-websocket-protocol"] == f"{PACKED_PROTOCOL}, {READS_PROTOCOL}"
    assert [a[0] for a in asked] == ["channel", "http"]
    assert asked[0][1] is None  # no access checks here: nobody's caller, as over HTTP
    assert counted == [(INTERNAL_SCAN, 200)]  # counted under its POST's route


def test_a_channel_without_reads_carries_lookups_and_the_reads_go_over_http():
    asked: list[str] = []

    async def over_http(request: Request) -> Answer:
        asked.append(request.path)
        return Answer(200, _page(decode_scan(request.body), "http"))

    async def scenario(server: WsServer, peers: Peers) -> None:
        for _ in range(2):
            page = await peers.scan(server.url, "t", 0, None, None, 10, None)
            assert page.items[0][0] == b"http-0"
            assert (await forward(peers, server.url, b"k")).value == b"k"  # on the channel

    server = run(scenario, reads=None, http=over_http)  # an older node: lookups alone
    assert len(server.upgrades) == 1 and server.messages == 2
    assert asked == [INTERNAL_SCAN, INTERNAL_SCAN]


def test_a_read_on_a_channel_answers_as_its_post_refused_unknown_and_beyond_the_cap(monkeypatch):
    async def top_many(body: bytes, caller: Any) -> bytes:
        reads = decode_top_many(body).reads
        if reads[0].partition == 7:
            raise NotHere("n2 holds no usable replica of t[7]")
        return encode(TopResults([ScanResult([], Source(r.partition)) for r in reads]))

    channels = LookupChannels(
        Owner(),  # type: ignore[arg-type]
        None,
        caller,
        error_response,
        {INTERNAL_TOP_MANY: top_many},
    )
    sent: list[ChannelAnswer] = []

    async def deliver(answer: ChannelAnswer) -> None:
        sent.append(answer)

    def ask(ask_id: int, partition: int, path: str = INTERNAL_TOP_MANY) -> tuple[int, int]:
        body = encode(TopMany([Top("t", partition, 10), Top("t", partition + 1, 10)]))

        async def main() -> ChannelAnswer:
            waits: set[asyncio.Task[None]] = set()
            now = channels._read(ChannelAsk(ask_id, body, path=path), waits, set(), deliver)
            if now is None:
                await asyncio.gather(*waits)
                return sent.pop()
            return now

        answer = asyncio.run(main())
        return answer.id, answer.status

    assert ask(1, 0) == (1, 200)
    assert ask(2, 7) == (2, 421)  # as its POST answers it: the peer asks the next replica
    assert ask(3, 0, "/v1/internal/metadata") == (3, 404)  # not a read a channel carries
    monkeypatch.setattr(channel_server, "MAX_READS", 0)
    assert ask(4, 0) == (4, 503)


def test_a_read_on_a_signed_channel_is_verified_over_its_own_path_and_sealed():
    asked: list[Any] = []

    async def scan_here(body: bytes, caller: Any) -> bytes:
        asked.append(caller)
        return _page(decode_scan(body), "channel")

    async def scenario(server: WsServer, peers: Peers) -> None:
        page = await peers.scan(server.url, "t", 2, None, None, 10, "alice-statement")
        assert page.items[0][0] == b"channel-0"  # opened with the read's credential

    server = run(scenario, cluster=ClusterKey(SECRET), reads={INTERNAL_SCAN: scan_here})
    assert CLUSTER_HEADER in server.upgrades[0]
    assert asked == [None]  # answered on the channel (HTTP here answers hellos alone)


def test_a_read_signed_for_another_path_or_node_is_refused_and_not_read():
    key = ClusterKey(SECRET)
    url = "http://127.0.0.1:1"
    asked: list[bytes] = []

    async def scan_here(body: bytes, caller: Any) -> bytes:
        asked.append(body)
        return b""

    channels = LookupChannels(
        Owner(),  # type: ignore[arg-type]
        Access(None, key, url),
        caller,
        error_response,
        {INTERNAL_SCAN: scan_here},
    )
    body = encode(Scan("t", 0, None, None, 10))
    as_lookups = key.sign(url, "POST", INTERNAL_LOOKUPS, body)  # the right node, another path
    elsewhere = key.sign("http://127.0.0.1:2", "POST", INTERNAL_SCAN, body)

    async def main(credential: str) -> ChannelAnswer | None:
        ask = ChannelAsk(5, body, credential, path=INTERNAL_SCAN)
        return channels._read(ask, set(), set(), None)  # type: ignore[arg-type]

    for credential in (as_lookups, elsewhere, ""):
        answer = asyncio.run(main(credential))
        assert answer is not None and answer.status == 403
    assert asked == []


def _scans_at_once(n: int) -> tuple[WsServer, list[list[bytes]]]:
    """``n`` scans asked in one turn of the loop, over a channel that carries reads."""

    async def scan_here(body: bytes, caller: Any) -> bytes:
        scan = decode_scan(body)
        await asyncio.sleep(0)  # finished by tasks of their own, in one turn or a few
        return encode(ScanResult([(b"p%d" % scan.partition, b"v")], Source(scan.partition)))

    pages: list[list[bytes]] = []

    async def scenario(server: WsServer, peers: Peers) -> None:
        await peers.scan(server.url, "t", 99, None, None, 10, None)  # the channel opened
        asked = [peers.scan(server.url, "t", p, None, None, 10, None) for p in range(n)]
        pages.extend([k for k, _ in page.items] for page in await asyncio.gather(*asked))

    return run(scenario, reads={INTERNAL_SCAN: scan_here}), pages


def test_a_packed_channel_sends_a_turns_asks_in_one_message_and_pairs_every_answer():
    server, pages = _scans_at_once(6)
    assert server.upgrades[0]["sec-websocket-protocol"] == channel_module.OFFERED
    assert pages == [[b"p%d" % p] for p in range(6)]
    assert server.messages == 2  # the first scan's message, then the six together


def test_a_node_that_knows_reads_alone_is_sent_one_message_per_ask(monkeypatch):
    # The owner an older kiq: it picks kiq-reads from what is offered.
    monkeypatch.setattr(channel_server, "PACKED_PROTOCOL", "kiq-not-known-there")
    server, pages = _scans_at_once(6)
    assert pages == [[b"p%d" % p] for p in range(6)]
    assert server.messages == 7


def test_a_node_that_offers_reads_alone_is_answered_one_message_per_answer(monkeypatch):
    # The asker an older kiq: it offers kiq-reads alone, and reads one answer per message.
    monkeypatch.setattr(channel_module, "OFFERED", READS_PROTOCOL)
    server, pages = _scans_at_once(6)
    assert server.upgrades[0]["sec-websocket-protocol"] == READS_PROTOCOL
    assert pages == [[b"p%d" % p] for p in range(6)]
    assert server.messages == 7


def test_a_granian_node_takes_the_packed_channel_from_the_subprotocols_offered() -> None:
    """The real server parses ``Sec-WebSocket-Protocol`` with two values offered: the
    node picks the packed protocol, and a turn's reads travel on it together."""

    async def scan_here(body: bytes, caller: Any) -> bytes:
        scan = decode_scan(body)
        return encode(ScanResult([(b"p%d" % scan.partition, b"v")], Source(scan.partition)))

    channels = LookupChannels(
        Owner(),  # type: ignore[arg-type]
        None,
        caller,
        error_response,
        {INTERNAL_SCAN: scan_here},
    )
    chosen: list[str | None] = []

    async def main() -> None:
        server, serving, url = await granian_serving(ChannelNode(channels, chosen.append))
        peers = Peers("n1", Router("n1"), 5000)
        try:
            asked = [peers.scan(url, "t", p, None, None, 10, None) for p in range(8)]
            pages = await asyncio.gather(*asked)
            assert [page.items[0][0] for page in pages] == [b"p%d" % p for p in range(8)]
            assert (await forward(peers, url, b"k")).value == b"k"  # lookups beside them
        finally:
            peers.close()
            server.stop()
            await asyncio.wait_for(serving, 5.0)

    asyncio.run(main())
    assert chosen == [PACKED_PROTOCOL]

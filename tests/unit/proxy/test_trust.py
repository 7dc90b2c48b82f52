"""Where `kiq proxy` sends credentials (only to the nodes it was given or that they vouch
for), and the caller's address it seals for them, which a node takes as the request's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from kiq.api.relayed import RelayedCallers
from kiq.client.router import Router
from kiq.proxy import CallerSeal, ProxyApp
from kiq.proxy.trust import Vouched, origin_of
from kiq.security.callers import HEADER
from tests.unit.proxy.asgi import Nodes, body_of, call, key_in, scope

SECRET = b"s" * 32
CALLER_TOKEN = "Bearer caller-token"


def test_no_credential_goes_to_a_url_no_trusted_node_vouches_for(caplog):
    nodes = Nodes()
    app = ProxyApp([Nodes.N1], token="proxy-own", transport=nodes.transport)
    ghostly = key_in(0)  # the metadata names ``ghost`` as this key's partition's active
    auth = [("authorization", CALLER_TOKEN)]

    async def run() -> None:
        one = await call(app, scope("GET", f"/v1/tables/t/keys/{ghostly}", auth), body_of(b""))
        assert one.status == 200 and one.body == b'{"k":"%s"}' % ghostly.encode()
        body = b'{"keys": ["%s", "%s"]}' % (ghostly.encode(), key_in(1).encode())
        many = await call(app, scope("POST", "/v1/tables/t/multiget", auth), body_of(body))
        assert many.status == 200 and ghostly.encode() in many.body

    with caplog.at_level(logging.WARNING, logger="kiq.proxy.trust"):
        asyncio.run(run())
    assert nodes.to(Nodes.GHOST) == [], "the proxy sent a request to an unvouched URL"
    sent = nodes.to(Nodes.N1)
    assert any(r.headers.get("authorization") == "Bearer proxy-own" for r in sent)
    assert any(r.headers.get("authorization") == CALLER_TOKEN for r in sent)
    assert caplog.text.count("proxy refused: not a vouched node url=" + Nodes.GHOST) == 1


def test_vouched_origins_are_the_seeds_and_the_metadatas_members():
    router = Router(["http://n1.test:8080/"])
    seen: list[str] = []
    gate = Vouched(
        router, httpx.MockTransport(lambda r: seen.append(str(r.url)) or httpx.Response(204))
    )

    async def send(url: str) -> int | str:
        async with httpx.AsyncClient(transport=gate) as http:
            try:
                return (await http.get(url)).status_code
            except httpx.ConnectError as exc:
                return str(exc)

    assert asyncio.run(send("http://n1.test:8080/v1/health/live")) == 204
    assert "neither one of --nodes" in str(asyncio.run(send("http://n1.test:8081/x")))
    assert "neither one of --nodes" in str(asyncio.run(send("https://n1.test:8080/x")))
    assert origin_of("http://N1.test/x") == "http://n1.test:80"
    assert seen == ["http://n1.test:8080/v1/health/live"]


def node_side(seal: CallerSeal, request: httpx.Request) -> dict[str, Any]:
    """``request`` as a node's ASGI scope, after the node took the sealed caller (if any)."""
    raw = request.url.raw_path
    path, _, query = raw.partition(b"?")
    scope = {
        "type": "http",
        "method": request.method,
        "path": path.decode(),
        "raw_path": path,
        "query_string": query,
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "client": ("10.0.0.9", 5000),  # the proxy's own address
    }
    RelayedCallers(seal).take(scope)
    return scope


def test_each_caller_reaches_the_node_as_its_own_address():
    nodes = Nodes()
    app = ProxyApp([Nodes.N1], callers=CallerSeal(SECRET), transport=nodes.transport)
    forged = [("x-kiq-caller", "203.0.113.1 1.0123456789abcdef." + "0" * 64)]

    async def run() -> None:
        for client in ("198.51.100.7", "2001:db8::5"):
            answer = await call(
                app, scope("GET", "/v1/tables/t/range", forged, client, "limit=5"), body_of(b"")
            )
            assert answer.status == 200

    asyncio.run(run())
    node = CallerSeal(SECRET)
    calls = [r for r in nodes.seen if r.url.path == "/v1/tables/t/range"]
    assert [node_side(node, r)["client"][0] for r in calls] == ["198.51.100.7", "2001:db8::5"]
    assert all(HEADER.encode() not in dict(node_side(node, r)["headers"]) for r in calls)
    own = [r for r in nodes.seen if r.url.path in ("/v1/metadata", "/v1/tables")]
    assert own and all(HEADER not in r.headers for r in own), "the proxy's own calls, sealed"


def test_a_node_takes_only_a_fresh_seal_made_with_its_secret_for_this_request():
    proxy, node = CallerSeal(SECRET), CallerSeal(SECRET)
    request = httpx.Request("GET", "http://n1.test/v1/tables/t/keys/a?max_lag=5")
    request.headers[HEADER] = proxy.seal("GET", "/v1/tables/t/keys/a?max_lag=5", "192.0.2.4")
    assert node_side(node, request)["client"] == ("192.0.2.4", 0)
    assert node_side(node, request)["client"] == ("10.0.0.9", 5000), "a replayed seal was taken"

    other = CallerSeal(b"t" * 32)
    request.headers[HEADER] = other.seal("GET", "/v1/tables/t/keys/a?max_lag=5", "192.0.2.4")
    assert node_side(node, request)["client"] == ("10.0.0.9", 5000)
    for target, address in (("/v1/tables/t/keys/b?max_lag=5", "192.0.2.4"), (None, "x" * 65)):
        request.headers[HEADER] = proxy.seal(
            "GET", target or request.url.raw_path.decode(), address
        )
        assert node_side(node, request)["client"] == ("10.0.0.9", 5000), (target, address)

    late = CallerSeal(SECRET, clock=lambda: 1_000.0)
    request.headers[HEADER] = late.seal("GET", "/v1/tables/t/keys/a?max_lag=5", "192.0.2.4")
    assert node_side(node, request)["client"] == ("10.0.0.9", 5000)


@pytest.mark.parametrize("value", ["", "a", "1.2.3.4", "1.2.3.4 x.y.z", "1.2.3.4 1.2.3.4"])
def test_junk_in_the_header_is_ignored(value: str):
    request = httpx.Request("GET", "http://n1.test/v1/tables")
    request.headers[HEADER] = value
    assert node_side(CallerSeal(SECRET), request)["client"] == ("10.0.0.9", 5000)

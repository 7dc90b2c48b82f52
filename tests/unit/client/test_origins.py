"""The client's token goes only to its seeds and to the members a trusted node's metadata
names (``kiq.client.origins``): never to a URL it met any other way."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiq.client import AsyncClient, Client
from kiq.client.errors import ClientError
from kiq.client.origins import Credentials, origin_of, origins
from kiq.client.router import Router
from kiq.client.topology import Topology
from tests.unit.client.fake_cluster import NODES, FakeCluster

KEYS = [f"k{i}" for i in range(40)]
TOKEN = "tkn"
STRANGERS = [
    "http://n9.test/v1/health/live",
    "http://n1.test.evil.test/v1/metadata",  # a seed's name as a prefix
    "http://n1.test@evil.test/v1/metadata",  # as user info
    "http://n1.test:8080/v1/metadata",  # another port
    "https://n1.test/v1/metadata",  # another scheme
]


class Network:
    """The fake cluster's two nodes, and every other host: recorded, answered ``{}``."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.elsewhere: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        known = {httpx.URL(u).host for u in NODES.values()}
        if request.url.host in known and request.url.port is None and request.url.scheme == "http":
            return self.cluster.handle(request)
        self.elsewhere.append(request)
        return httpx.Response(200, json={})


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster(values={k: {"n": i} for i, k in enumerate(KEYS)})


def test_the_token_goes_to_the_seeds_and_the_members_the_metadata_names_only(cluster):
    network = Network(cluster)
    with Client([NODES["n1"]], token=TOKEN, transport=httpx.MockTransport(network.handle)) as kiq:
        assert [kiq.get("t", k) for k in KEYS] == [{"n": i} for i in range(len(KEYS))]
        for url in STRANGERS:  # what a Location, or anything but the metadata, could name
            kiq._http.get(url)
    asked = {n for n, _, _ in cluster.asked}
    assert asked == {"n1", "n2"}  # n2: named by n1's metadata
    assert all(h["authorization"] == f"Bearer {TOKEN}" for h in cluster.headers)
    assert len(network.elsewhere) == len(STRANGERS)
    assert all("authorization" not in r.headers for r in network.elsewhere)


def test_the_async_client_keeps_to_the_same_origins(cluster):
    network = Network(cluster)

    async def scenario() -> None:
        transport = httpx.MockTransport(network.handle)
        async with AsyncClient([NODES["n1"]], token=TOKEN, transport=transport) as kiq:
            assert await kiq.get("t", "k3") == {"n": 3}
            for url in STRANGERS:
                await kiq._http.get(url)

    asyncio.run(scenario())
    assert all(h["authorization"] == f"Bearer {TOKEN}" for h in cluster.headers)
    assert network.elsewhere and all("authorization" not in r.headers for r in network.elsewhere)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_redirect_is_an_error_and_its_location_is_never_asked(cluster, use_async: bool):
    network = Network(cluster)
    key = "k5"
    elsewhere = f"http://n9.test/v1/tables/t/keys/{key}"

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(f"/keys/{key}"):
            return httpx.Response(307, headers={"location": elsewhere})
        return network.handle(request)

    transport = httpx.MockTransport(handle)
    with pytest.raises(ClientError) as redirected:
        if use_async:

            async def scenario() -> None:
                async with AsyncClient([NODES["n1"]], token=TOKEN, transport=transport) as kiq:
                    await kiq.get("t", key)

            asyncio.run(scenario())
        else:
            with Client([NODES["n1"]], token=TOKEN, transport=transport) as kiq:
                kiq.get("t", key)
    assert redirected.value.status == 307 and "follows no redirect" in redirected.value.message
    assert network.elsewhere == []  # the Location was never asked, with the token or without


def test_a_member_the_metadata_no_longer_names_gets_no_token(cluster):
    network = Network(cluster)
    with Client([NODES["n1"]], token=TOKEN, transport=httpx.MockTransport(network.handle)) as kiq:
        kiq.refresh()
        assert kiq._core.router.trusts(NODES["n2"])
        leaving = cluster.metadata

        def without_n2(node: str) -> dict:
            meta = leaving(node)
            meta["nodes"] = [n for n in meta["nodes"] if n["id"] != "n2"]
            for table in meta["tables"].values():
                for part in table["partitions"]:
                    part["urls"] = {n: u for n, u in part["urls"].items() if n != "n2"}
            return meta

        cluster.metadata = without_n2  # type: ignore[method-assign]
        kiq.refresh()
        before = len(cluster.headers)
        kiq._http.get(NODES["n2"] + "/v1/health/live")
    assert "authorization" not in cluster.headers[before]
    assert not kiq._core.router.trusts(NODES["n2"])
    assert kiq._core.router.trusts(NODES["n1"])  # a seed stays trusted


@pytest.mark.parametrize(
    ("url", "trusted"),
    [
        ("http://n1.test/v1/tables/t/keys/k", True),
        ("HTTP://N1.TEST:80/v1/metadata", True),
        ("https://n2.test:8443/v1/metadata", True),
        ("https://n2.test/v1/metadata", False),
        ("http://n2.test:8443/v1/metadata", False),
        *((url, False) for url in STRANGERS),
        ("http://evil.test/?next=http://n1.test", False),
        ("n1.test/v1/metadata", False),
    ],
)
def test_an_origin_is_a_scheme_a_host_and_a_port(url: str, trusted: bool):
    credentials = Credentials(TOKEN, lambda: origins(["http://n1.test/", "https://n2.test:8443"]))
    request = httpx.Request("GET", url, headers={"authorization": "Bearer a-callers"})
    sent = next(credentials.auth_flow(request))
    assert sent.headers.get("authorization") == (f"Bearer {TOKEN}" if trusted else None)


def test_a_topology_vouches_for_its_members_and_its_replicas():
    router = Router(["http://n1.test"])
    metadata = {
        "view_version": 3,
        "nodes": [{"id": "n1", "url": "http://n1.test"}, {"id": "n2", "url": "http://n2.test/"}],
        "tables": {"t": {"partitions": [{"partition": 0, "active": "n3", "standbys": []}]}},
    }
    metadata["tables"]["t"]["partitions"][0]["urls"] = {"n3": "http://n3.test"}
    router.update(Topology.of(metadata, {"tables": []}))
    assert router.trusted() == origins(["http://n1.test", "http://n2.test", "http://n3.test"])


_HOSTS = st.sampled_from(["n1.test", "n2.test", "n9.test", "127.0.0.1", "[::1]", "evil.test"])
_PORTS = st.one_of(st.none(), st.sampled_from([80, 443, 8080, 9000]))


def _url(scheme: str, host: str, port: int | None) -> str:
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "") + "/v1/x"


@settings(max_examples=200, deadline=None)
@given(
    seeds=st.lists(st.tuples(st.sampled_from(["http", "https"]), _HOSTS, _PORTS), min_size=1),
    asked=st.tuples(st.sampled_from(["http", "https"]), _HOSTS, _PORTS),
)
def test_the_token_never_goes_to_a_host_and_port_no_seed_has(seeds, asked):
    def effective(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
        return scheme, host.strip("[]"), port or {"http": 80, "https": 443}[scheme]

    router = Router([_url(*s) for s in seeds])
    credentials = Credentials(TOKEN, router.trusted)
    request = httpx.Request("GET", _url(*asked))
    sent = "authorization" in next(credentials.auth_flow(request)).headers
    assert sent == (effective(*asked) in {effective(*s) for s in seeds})
    assert sent == router.trusts(_url(*asked))


def test_a_url_that_is_not_http_has_no_origin():
    assert origin_of("ftp://n1.test/") is None
    assert origin_of("n1.test:80") is None
    assert origin_of("http:///v1/metadata") is None

"""Two nodes in process with authentication on: tokens, scopes, and members-only paths.

``n1`` owns the even partitions of ``t``, ``n2`` the odd ones, so a lookup through
either node is local for some keys and forwarded for the others.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.partitioning import partition_for
from kiq.peers.wire import (
    INTERNAL_LOOKUPS,
    PRINCIPAL,
    Lookup,
    Outcome,
    decode_results,
    encode,
)
from kiq.replicas import ReplicaState
from kiq.security import (
    CLUSTER_HEADER,
    ClusterKey,
    Grants,
    Security,
    TokenCache,
    TokenVerifier,
    VerifiedCaller,
)
from kiq.security.keys import SecretKey
from kiq.settings import LimitsSettings
from tests.unit.security.keys import SECRET, hs256, secret_file, unsigned
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
KEYS = {f"key-{i}": f'{{"n":{i}}}'.encode() for i in range(40)}
QUOTE = b'{"symbol":"AAPL","last":null}'


def security(tmp_path: Path) -> Security:
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    return Security(TokenCache(verifier), ClusterKey(b"g" * 32))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalNode, LocalNode]]:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("t", p) for p in range(0, PARTITIONS, 2)] + [("stock-quotes", 0)])
    cluster.assign("n2", [("t", p) for p in range(1, PARTITIONS, 2)])
    tables = {"t=t,standby=0": PARTITIONS, "stock-quotes=stock-quotes,standby=0": 1}
    nodes = [
        start_node(tmp_path, cluster, tables, node_id, security=security(tmp_path))
        for node_id in ("n1", "n2")
    ]
    for node in nodes:
        wait_until(serving(node.node, ReplicaState.ACTIVE), what=f"{node.node.node_id} active")
    for offset, (key, value) in enumerate(KEYS.items()):
        owner = nodes[partition_for(key, PARTITIONS) % 2]
        owner.put("t", key, value, offset)
    nodes[0].put("stock-quotes", "AAPL", QUOTE, 0)
    yield nodes[0], nodes[1]
    for node in nodes:
        node.node.stop()


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


def get(node: LocalNode, target: str, token: str | None = None):
    return asyncio.run(call(node.app, "GET", target, headers=bearer(token) if token else ()))


def post(node: LocalNode, target: str, body: bytes, headers=()):
    return asyncio.run(call(node.app, "POST", target, body, headers))


def test_a_node_with_tokens_checks_the_raw_path_and_one_without_calls_the_lookup_itself(
    pair, tmp_path
):
    n1, _ = pair
    assert n1.app._lookup != n1.app.lookups.get
    cluster = Cluster()
    cluster.join("n9", "http://n9.test")
    plain = start_node(tmp_path / "plain", cluster, {"t=t": 1}, "n9")
    try:
        assert plain.app._lookup == plain.app.lookups.get  # no layer in front of it
        assert plain.app.access is None
    finally:
        plain.node.stop()


def test_every_key_through_either_node_with_kiq_read(pair):
    token = hs256(scope="kiq:read")
    for node in pair:
        served = set()
        for key, value in KEYS.items():
            r = get(node, f"/v1/tables/t/keys/{key}", token)
            assert (r.status, r.body) == (200, value), (node.node.node_id, key)
            served.add(r.headers["x-kiq-served-by"])
        assert served == {"n1", "n2"}, "some keys local, some forwarded"


def test_kiq_read_of_one_table_reads_that_table_only(pair):
    for node in pair:
        for key in ("key-1", "key-2"):
            other = get(node, f"/v1/tables/t/keys/{key}", hs256(scope="kiq:read:other"))
            assert (other.status, other.json()["error"]) == (403, "insufficient_scope")
            assert other.json()["scope"] == "kiq:read:t"
            assert other.headers["www-authenticate"] == (
                'Bearer realm="kiq", error="insufficient_scope", scope="kiq:read:t"'
            )
            assert get(node, f"/v1/tables/t/keys/{key}", hs256(scope="kiq:read:t")).status == 200


@pytest.mark.parametrize(
    "token",
    [
        hs256(exp=1),
        hs256(secret=b"w" * 64),
        unsigned(),
        hs256(aud="someone-else"),
        "not-a-jwt",
    ],
    ids=["expired", "wrong-signature", "alg-none", "wrong-audience", "garbage"],
)
def test_tokens_we_do_not_accept_are_401_invalid_token(pair, token: str):
    n1, _ = pair
    for target in ("/v1/tables/t/keys/key-1", "/v1/tables/t/range", "/v1/metadata", "/v1/tables"):
        r = get(n1, target, token)
        assert (r.status, r.json()["error"]) == (401, "invalid_token"), target
        assert r.headers["www-authenticate"] == 'Bearer realm="kiq", error="invalid_token"'
        assert r.headers["content-type"] == "application/json"


def test_no_token_is_401_with_a_bare_challenge(pair):
    n1, _ = pair
    for target in ("/v1/tables/t/keys/key-1", "/v1/metadata", "/metrics", "/v1/stocks/AAPL"):
        r = get(n1, target)
        assert (r.status, r.json()["error"]) == (401, "unauthorized"), target
        assert r.headers["www-authenticate"] == 'Bearer realm="kiq"'
    basic = asyncio.run(
        call(n1.app, "GET", "/v1/tables/t/keys/key-1", headers=[(b"authorization", b"Basic x")])
    )
    assert basic.status == 401


def test_health_stays_open(pair):
    n1, _ = pair
    assert get(n1, "/v1/health/live").status == 200
    assert get(n1, "/v1/health/ready").status in (200, 503)


def test_metrics_and_the_cluster_wide_metadata_need_admin(pair):
    n1, _ = pair
    for target in ("/metrics", "/v1/metadata?cluster=true"):
        r = get(n1, target, hs256(scope="kiq:read"))
        assert (r.status, r.json()["scope"]) == (403, "kiq:admin"), target
        assert get(n1, target, hs256(scope="kiq:admin")).status == 200, target
    # The map a client or proxy routes by needs a token, not an admin's: it names proven
    # members only, so a read token is all a router holds.
    meta = get(n1, "/v1/metadata", hs256(scope="kiq:read:t"))
    assert meta.status == 200
    assert meta.json()["node"]["id"] == "n1" and "tables" in meta.json()
    # Asked of every node, with the caller's token: n2 answers for its replicas.
    meta = get(n1, "/v1/metadata?cluster=true", hs256(scope="kiq:admin")).json()
    reachable = {
        r["node"]: r["reachable"] for p in meta["tables"]["t"]["partitions"] for r in p["replicas"]
    }
    assert reachable == {"n1": True, "n2": True}


def test_no_secret_in_metadata(pair, tmp_path: Path):
    n1, _ = pair
    body = get(n1, "/v1/metadata?cluster=true", hs256(scope="kiq:admin")).body
    assert SECRET not in body and b"g" * 32 not in body and str(tmp_path).encode() not in body


def test_multiget_and_range_need_read_on_their_table(pair):
    n1, _ = pair
    keys = b'{"keys": ["key-1", "key-2", "key-3"]}'
    ok = post(n1, "/v1/tables/t/multiget", keys, bearer(hs256(scope="kiq:read:t")))
    assert ok.status == 200 and len(ok.json()["found"]) == 3
    no = post(n1, "/v1/tables/t/multiget", keys, bearer(hs256(scope="kiq:read:x")))
    assert (no.status, no.json()["error"]) == (403, "insufficient_scope")
    page = get(n1, "/v1/tables/t/range?limit=100", hs256(scope="kiq:read"))
    assert page.status == 200 and len(page.json()["items"]) == len(KEYS)
    assert get(n1, "/v1/tables/t/range", hs256(scope="kiq:write")).status == 403


def test_application_routes_need_read_on_what_they_read_and_write_to_write(pair):
    n1, _ = pair
    for node in pair:  # n2 forwards the quote's lookup to n1
        r = get(node, "/v1/stocks/AAPL", hs256(scope="kiq:read:t"))
        assert (r.status, r.json()["scope"]) == (403, "kiq:read:stock-quotes")
        assert get(node, "/v1/stocks/AAPL", hs256(scope="kiq:read:stock-quotes")).status == 200
    words = b'{"text": "to be"}'
    r = post(n1, "/v1/words", words, bearer(hs256(scope="kiq:read")))
    assert (r.status, r.json()["scope"]) == (403, "kiq:write")
    assert n1.writer.records == []
    assert post(n1, "/v1/words", words, bearer(hs256(scope="kiq:write"))).status == 202
    assert post(n1, "/v1/words", words).status == 401


def test_the_rate_limit_counts_the_verified_subject(tmp_path):
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    limits = LimitsSettings(rate_limit=1, rate_burst=2)
    node = start_node(tmp_path, cluster, {"t=t": 1}, security=security(tmp_path), limits=limits)
    try:
        wait_until(serving(node.node, ReplicaState.ACTIVE), what="n1 active")
        node.put("t", "k", b"{}", 0)
        for target in ("/v1/tables/t/keys/k", "/v1/tables/t/range"):  # the raw path, a route
            bob = [get(node, target, hs256(sub=f"bob{target}")).status for _ in range(3)]
            assert bob == [200, 200, 429], target
            assert get(node, target, hs256(sub=f"alice{target}")).status == 200, target
    finally:
        node.node.stop()


def raw_path_counts(node: LocalNode) -> dict[str, float]:
    """The raw lookup path's answers by status, as /metrics shows them (``get``)."""
    text = get(node, "/metrics", hs256(scope="kiq:admin")).body.decode()
    found = re.findall(r'^kiq_requests_total\{route="get",status="(\d+)"\} (\S+)$', text, re.M)
    return {status: float(n) for status, n in found}


def test_the_raw_paths_refusals_count_in_metrics_as_every_routes_do(tmp_path):
    # What the token refusals alert (deploy/prometheus/kiq-alerts.yml) counts: a refused
    # lookup on the hot path is answered before the lookup itself, and counted all the same.
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    limits = LimitsSettings(rate_limit=1, rate_burst=1)
    node = start_node(tmp_path, cluster, {"t=t": 1}, security=security(tmp_path), limits=limits)
    try:
        wait_until(serving(node.node, ReplicaState.ACTIVE), what="n1 active")
        node.put("t", "k", b"{}", 0)
        target = "/v1/tables/t/keys/k"
        assert get(node, target).status == 401  # no token
        assert get(node, target, "not-a-jwt").status == 401
        assert get(node, target, hs256(scope="kiq:read:other")).status == 403
        assert [get(node, target, hs256(sub="bob")).status for _ in range(2)] == [200, 429]
        assert raw_path_counts(node) == {"200": 1, "401": 2, "403": 1, "429": 1}
    finally:
        node.node.stop()


# -- the members-only paths --------------------------------------------------------------


def batch(key: str) -> bytes:
    return encode([Lookup("t", key.encode(), None, None, 0)])


def owned_by_n1() -> str:
    return next(k for k in KEYS if partition_for(k, PARTITIONS) % 2 == 0)


def test_internal_paths_refuse_a_user_token_alone(pair):
    n1, _ = pair
    admin = bearer(hs256(scope="kiq:read kiq:admin"))
    for path, body in [
        (INTERNAL_LOOKUPS, batch(owned_by_n1())),
        ("/v1/internal/multiget", b""),
        ("/v1/internal/scan", b""),
    ]:
        r = post(n1, path, body, admin)
        assert (r.status, r.json()["error"]) == (403, "not_cluster_member"), path
    r = asyncio.run(call(n1.app, "GET", "/v1/internal/metadata", headers=admin))
    assert r.status == 403


N1 = "http://n1.test"


def statement(scope: str = "kiq:read", sub: str = "alice", ttl_s: float = 600.0) -> str:
    """What a member says of the caller it verified (``VerifiedCaller.statement``)."""
    return VerifiedCaller(sub, Grants.parse(scope), time.time() + ttl_s).statement


def signed(
    path: str, body: bytes, key: ClusterKey, caller: str | None, to: str = N1
) -> tuple[list[tuple[bytes, bytes]], str]:
    credential = key.sign(to, "POST", path, body, caller)
    headers = [(CLUSTER_HEADER.encode(), credential.encode())]
    if caller is not None:
        headers.append((PRINCIPAL.encode(), caller.encode()))
    return headers, credential


def test_a_member_request_names_its_caller_and_is_answered_sealed(pair):
    n1, _ = pair
    member = ClusterKey(b"g" * 32)
    body = batch(owned_by_n1())
    headers, credential = signed(INTERNAL_LOOKUPS, body, member, statement())
    ok = post(n1, INTERNAL_LOOKUPS, body, headers)
    assert ok.status == 200
    assert decode_results(member.open(credential, ok.body))[0].outcome is Outcome.FOUND
    no_caller, _ = signed(INTERNAL_LOOKUPS, body, member, None)
    assert post(n1, INTERNAL_LOOKUPS, body, no_caller).status == 401
    stranger, _ = signed(INTERNAL_LOOKUPS, body, ClusterKey(b"h" * 32), statement())
    forged = post(n1, INTERNAL_LOOKUPS, body, stranger)
    assert (forged.status, forged.json()["error"]) == (403, "not_cluster_member")
    assert post(n1, INTERNAL_LOOKUPS, body, headers).json()["message"] == (
        "cluster credential already used"
    )


def test_a_member_request_made_for_another_node_or_caller_is_refused(pair):
    n1, _ = pair
    member = ClusterKey(b"g" * 32)
    body = batch(owned_by_n1())
    for_n2, _ = signed(INTERNAL_LOOKUPS, body, member, statement(), to="http://n2.test")
    assert post(n1, INTERNAL_LOOKUPS, body, for_n2).status == 403
    headers, _ = signed(INTERNAL_LOOKUPS, body, member, statement("kiq:read:other"))
    swapped = [h for h in headers if h[0] != PRINCIPAL.encode()]
    swapped.append((PRINCIPAL.encode(), statement("kiq:read kiq:admin").encode()))
    assert post(n1, INTERNAL_LOOKUPS, body, swapped).status == 403
    expired, _ = signed(INTERNAL_LOOKUPS, body, member, statement(ttl_s=-1))
    r = post(n1, INTERNAL_LOOKUPS, body, expired)
    assert (r.status, r.json()["error"]) == (401, "invalid_token")
    # A user's token alone, even with the member's credential, names no caller.
    headers, _ = signed(INTERNAL_LOOKUPS, body, member, None)
    assert post(n1, INTERNAL_LOOKUPS, body, headers + bearer(hs256())).status == 401


def test_the_owner_applies_the_callers_scopes(pair):
    n1, _ = pair
    member = ClusterKey(b"g" * 32)
    body = batch(owned_by_n1())
    headers, credential = signed(INTERNAL_LOOKUPS, body, member, statement("kiq:read:other"))
    r = post(n1, INTERNAL_LOOKUPS, body, headers)
    assert r.status == 200
    assert decode_results(member.open(credential, r.body))[0].outcome is Outcome.FORBIDDEN


def test_forwarded_requests_carry_the_cluster_credential_and_the_callers_token(pair):
    _, n2 = pair
    network = n2.peers._sender._pool
    token = hs256(scope="kiq:read")
    key = owned_by_n1()
    assert get(n2, f"/v1/tables/t/keys/{key}", token).status == 200
    _, path, headers = network.sent[-1]  # type: ignore[attr-defined]
    assert path == INTERNAL_LOOKUPS
    assert "authorization" not in headers and all(token not in v for v in headers.values())
    assert VerifiedCaller.from_statement(headers[PRINCIPAL]).subject == "alice"
    assert CLUSTER_HEADER in headers

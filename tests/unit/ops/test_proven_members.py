"""Metadata and redirects name only the members a node has proven (``kiq.ops.proven``).

Two nodes in process with authentication and a cluster key, and a third group member,
``n9``, that holds no key: it answers the challenge with what it was sent and everything
else with forged values, as the round-2 impostor does. It is assigned partitions of its own.
Neither node names it in ``/v1/metadata`` nor redirects a caller to it; it is sent nothing
but the challenge. ``tests/integration/test_impostor.py`` holds real nodes to the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiq.ops import proven
from kiq.partitioning import partition_for
from kiq.peers.wire import INTERNAL_HELLO
from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 6
IMPOSTOR = "http://n9.test"
KEYS = {f"key-{i}": f'{{"n":{i}}}'.encode() for i in range(60)}
# Tokens are minted when a test asks (one minted at collection may expire before a long run
# gets here), and remembered so that no header the impostor saw may carry any of them.
_MINTED: list[str] = []


def admin() -> str:
    _MINTED.append(hs256(scope="kiq:admin"))
    return _MINTED[-1]


def reader() -> str:
    _MINTED.append(hs256(scope="kiq:read"))
    return _MINTED[-1]


class Impostor:
    """An ASGI app that records every request (method, path, headers) and forges answers."""

    def __init__(self, hang_s: float = 0.0) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.hang_s = hang_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = (await receive()).get("body", b"")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen.append((scope["method"], scope["path"], headers))
        await asyncio.sleep(self.hang_s)
        payload = (body if scope["path"] == INTERNAL_HELLO else b'{"forged":true}') + b"\0" * 32
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": payload})


def security(tmp_path: Path) -> Security:
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    return Security(TokenCache(verifier), ClusterKey(b"g" * 32))


def owned(*partitions: int) -> list[tuple[str, int]]:
    return [("t", p) for p in partitions]


def start_trio(tmp_path: Path, impostor: Impostor) -> tuple[Cluster, LocalNode, LocalNode]:
    """n1, n2 and the impostor n9, each active for two partitions; n1 and n2 hold every
    partition (standby=2), each with every key."""
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.join("n9", IMPOSTOR)
    cluster.network[IMPOSTOR] = impostor
    cluster.assign("n1", owned(0, 3))
    cluster.assign("n2", owned(1, 4))
    cluster.assign("n9", owned(2, 5))
    tables = {"t=t,standby=2": PARTITIONS}
    nodes = [
        start_node(tmp_path, cluster, tables, node_id, security=security(tmp_path))
        for node_id in ("n1", "n2")
    ]
    for node in nodes:
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
        wait_until(lambda n=node: "n9" in n.node.view.members, what="n9 in the view")  # type: ignore[misc]
        for offset, (key, value) in enumerate(KEYS.items()):
            node.put("t", key, value, offset)
    return cluster, nodes[0], nodes[1]


@pytest.fixture
def impostor() -> Impostor:
    return Impostor()


@pytest.fixture
def trio(tmp_path: Path, impostor: Impostor) -> Iterator[tuple[LocalNode, LocalNode]]:
    _, n1, n2 = start_trio(tmp_path, impostor)
    yield n1, n2
    n1.node.stop()
    n2.node.stop()


def get(node: LocalNode, target: str, token: str):
    headers = [(b"authorization", f"Bearer {token}".encode())]
    return asyncio.run(call(node.app, "GET", target, headers=headers))


def assert_only_challenged(impostor: Impostor) -> None:
    assert impostor.seen, "no node ever tried the impostor"
    for method, path, headers in impostor.seen:
        assert (method, path) == ("POST", INTERNAL_HELLO), (method, path)
        assert "authorization" not in headers
        assert not any(t in v for t in _MINTED for v in headers.values())


def test_metadata_names_no_member_it_has_not_proven(trio, impostor: Impostor):
    for node in trio:
        for target in ("/v1/metadata", "/v1/metadata?cluster=true"):
            r = get(node, target, admin())
            assert r.status == 200
            assert IMPOSTOR.encode() not in r.body and b"n9.test" not in r.body
            meta = r.json()
            assert meta["unproven"] == ["n9"]
            assert meta["nodes"] == [
                {"id": "n1", "url": "http://n1.test"},
                {"id": "n2", "url": "http://n2.test"},
            ]
            for part in meta["tables"]["t"]["partitions"]:
                named = {part["active"], *part["standbys"], *part["urls"]} - {None}
                assert named <= {"n1", "n2"}, (target, part)
                if part["partition"] in (2, 5):  # n9's: no active a caller may be sent to
                    assert part["active"] is None and sorted(part["standbys"]) == ["n1", "n2"]
                for replica in part.get("replicas", []):
                    assert replica["node"] in ("n1", "n2")
    assert_only_challenged(impostor)


def test_a_member_not_yet_proven_is_challenged_and_named_in_the_same_answer(trio):
    """No request went from n1 to n2 before: the metadata proves it first, then names it."""
    n1, _ = trio
    assert not asyncio.run(n1.peers.proven("http://n2.test"))  # not without a challenge
    meta = get(n1, "/v1/metadata", admin()).json()
    assert {"id": "n2", "url": "http://n2.test"} in meta["nodes"]
    part = meta["tables"]["t"]["partitions"][1]
    assert part["active"] == "n2" and part["urls"]["n2"] == "http://n2.test"
    assert asyncio.run(n1.peers.proven("http://n2.test"))  # the answer's challenge


def test_redirects_go_only_to_proven_members(trio, impostor: Impostor):
    by_partition: dict[int, list[str]] = {}
    for key in KEYS:
        by_partition.setdefault(partition_for(key, PARTITIONS), []).append(key)
    assert sorted(by_partition) == list(range(PARTITIONS))
    for node in trio:
        for round_ in range(3):  # the impostor's penalty for failing has not run out, or has
            for partition, keys in sorted(by_partition.items()):
                key = keys[round_ % len(keys)]
                r = get(node, f"/v1/tables/t/keys/{key}?redirect=true", reader())
                if r.status == 307:
                    owner = "n1" if partition in (0, 3) else "n2"
                    assert partition not in (2, 5), r.headers["location"]
                    assert r.headers["location"] == f"http://{owner}.test/v1/tables/t/keys/{key}"
                else:  # its own, or the impostor's: read from a standby as without redirect
                    assert (r.status, r.body) == (200, KEYS[key]), (partition, r.status)
                    assert r.headers["x-kiq-served-by"] in ("n1", "n2")
            time.sleep(0.6)
    assert_only_challenged(impostor)


def test_a_member_that_does_not_answer_the_challenge_in_time_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The wait for a proof is bounded: the answer comes, without the silent member."""
    monkeypatch.setattr(proven, "PROOF_WAIT_S", 0.2)
    silent = Impostor(hang_s=3.0)
    _, n1, n2 = start_trio(tmp_path, silent)
    try:
        started = time.monotonic()
        r = get(n1, "/v1/metadata", admin())
        assert time.monotonic() - started < 2.0
        assert r.status == 200 and IMPOSTOR.encode() not in r.body
        assert r.json()["unproven"] == ["n9"]
        key = next(k for k in KEYS if partition_for(k, PARTITIONS) == 2)
        started = time.monotonic()
        r = get(n1, f"/v1/tables/t/keys/{key}?redirect=true", reader())
        assert r.status == 200 and r.headers["x-kiq-served-by"] in ("n1", "n2")
    finally:
        n1.node.stop()
        n2.node.stop()

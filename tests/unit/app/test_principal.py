"""``Request.principal`` (the verified caller: subject, scopes, claims) and ``Request.delete``
(a tombstone through the node's writer), on a node with authentication and one without."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiq import BadRequest, KeyNotFound, Principal, Reply, Request, Routes, json_reply
from kiq.api.errors import Forbidden
from kiq.app import principal as principal_module
from kiq.replicas import ReplicaState
from kiq.security import ClusterKey, Grants, Security, TokenCache, TokenVerifier, VerifiedCaller
from kiq.security.keys import SecretKey
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

ROWS = {"alice|1": b'{"n":1}', "alice|2": b'{"n":2}', "bob|1": b'{"n":3}'}


async def me(request: Request) -> Reply:
    who = request.principal
    if who is None:
        return json_reply(None)
    assert request.principal is who  # made once per request
    return json_reply({"principal": who, "scopes": sorted(who.scopes)})


async def my_row(request: Request) -> Reply:
    """A user reads only their own rows."""
    who = request.principal
    key = request.path_params["key"]
    if who is None or not key.startswith(who.subject + "|"):
        raise Forbidden("only your own rows", key=key)
    value = await request.tables.get_json("rows", key)
    if value is None:
        raise KeyNotFound("no such row", key=key)
    return json_reply(value)


async def forget(request: Request) -> Reply:
    partition, offset = await request.delete("rows-in", request.path_params["key"])
    return json_reply({"partition": partition, "offset": offset})


async def tamper(request: Request) -> Reply:
    who = request.principal
    if who is None:
        raise BadRequest("no caller")
    refused = []
    for attempt in (
        lambda: who.claims.__setitem__("sub", "root"),  # type: ignore[attr-defined]
        lambda: who.claims["roles"].append("admin"),
        lambda: setattr(who, "subject", "root"),
    ):
        try:
            attempt()
        except (TypeError, AttributeError, dataclasses.FrozenInstanceError):
            refused.append(True)
    return json_reply({"refused": refused, "subject": who.subject})


async def untouched(request: Request) -> Reply:
    return json_reply({"ok": True})


def routes(app: Routes) -> None:
    app.get("/v1/me", me)
    app.get("/v1/rows/{key}", my_row)
    app.add("DELETE", "/v1/rows/{key}", forget)
    app.get("/v1/tamper", tamper)
    app.get("/v1/untouched", untouched)


def node(tmp_path: Path, security: Security | None) -> LocalNode:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("rows", 0)])
    local = start_node(
        tmp_path, cluster, {"rows=rows,standby=0": 1}, endpoints=[routes], security=security
    )
    wait_until(serving(local.node, ReplicaState.ACTIVE), what="active")
    for offset, (key, value) in enumerate(ROWS.items()):
        local.put("rows", key, value, offset)
    return local


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LocalNode]:
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    local = node(tmp_path, Security(TokenCache(verifier), ClusterKey(b"g" * 32)))
    yield local
    local.node.stop()


@pytest.fixture
def open_node(tmp_path: Path) -> Iterator[LocalNode]:
    local = node(tmp_path, None)
    yield local
    local.node.stop()


def ask(local: LocalNode, method: str, path: str, token: str | None = None) -> Any:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return asyncio.run(call(local.app, method, path, headers=headers))


def test_the_principal_is_the_verified_caller_with_its_tokens_claims(secured):
    token = hs256(scope="kiq:read orders:own kiq:write", tenant="acme", roles=["a", "b"])
    got = ask(secured, "GET", "/v1/me", token).json()  # json_reply takes a Principal as it is
    assert got["principal"]["subject"] == "alice"
    assert got["scopes"] == ["kiq:read", "kiq:write", "orders:own"]  # an app's own scope too
    claims = got["principal"]["claims"]
    assert (claims["tenant"], claims["roles"], claims["aud"]) == ("acme", ["a", "b"], "kiq")
    assert claims["exp"] > time.time()


def test_the_principal_and_its_claims_are_read_only(secured):
    got = ask(secured, "GET", "/v1/tamper", hs256(roles=["a"])).json()
    assert got == {"refused": [True, True, True], "subject": "alice"}


def test_a_handler_serves_a_user_only_their_own_rows(secured):
    alice, bob = hs256(sub="alice"), hs256(sub="bob")
    assert ask(secured, "GET", "/v1/rows/alice|2", alice).json() == {"n": 2}
    assert ask(secured, "GET", "/v1/rows/bob|1", bob).json() == {"n": 3}
    refused = ask(secured, "GET", "/v1/rows/bob|1", alice)
    assert (refused.status, refused.json()["error"]) == (403, "forbidden")
    assert ask(secured, "GET", "/v1/rows/alice|1").status == 401  # no token, no route at all


def test_a_node_without_authentication_has_no_principal(open_node):
    assert ask(open_node, "GET", "/v1/me").json() is None
    assert ask(open_node, "GET", "/v1/rows/alice|1").status == 403


def test_a_request_that_never_asks_pays_nothing(secured, monkeypatch: pytest.MonkeyPatch):
    made: list[str] = []
    of = principal_module.Principal.of

    def counted(verified: VerifiedCaller, authorization: str | None) -> Principal:
        made.append(verified.subject)
        return of(verified, authorization)

    monkeypatch.setattr(principal_module.Principal, "of", counted)
    assert ask(secured, "GET", "/v1/untouched", hs256()).status == 200
    assert made == []
    assert ask(secured, "GET", "/v1/me", hs256()).status == 200
    assert made == ["alice"]  # asked twice by the handler, made once


def test_a_caller_a_peer_vouches_for_has_kiqs_scopes_and_no_claims():
    verified = VerifiedCaller("alice", Grants(read=frozenset({"t"}), write=True), 2e9)
    vouched = Principal.of(VerifiedCaller.from_statement(verified.statement), None)
    assert vouched == Principal("alice", frozenset({"kiq:read:t", "kiq:write"}), {}, 2e9)
    assert dict(vouched.claims) == {}
    # A header with no readable token (never the case once verified) gives no claims either.
    assert Principal.of(verified, "Bearer junk").claims == {}


def test_delete_writes_a_tombstone_through_the_writer_with_kiq_write(secured):
    refused = ask(secured, "DELETE", "/v1/rows/alice|1", hs256(scope="kiq:read"))
    assert (refused.status, refused.json()["error"]) == (403, "insufficient_scope")
    assert refused.json()["scope"] == "kiq:write"
    assert secured.writer.records == []
    done = ask(secured, "DELETE", "/v1/rows/alice|1", hs256(scope="kiq:write"))
    assert (done.status, done.json()) == (200, {"partition": 0, "offset": 0})
    assert secured.writer.records == [("rows-in", b"alice|1", None)]


def test_delete_on_a_node_without_authentication(open_node):
    assert ask(open_node, "DELETE", "/v1/rows/k").status == 200
    assert open_node.writer.records == [("rows-in", b"k", None)]

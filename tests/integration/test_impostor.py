"""A process that joins the serving group as a kiq node, without the cluster secret.

Two real ``kiq serve`` nodes with ``--auth jwt`` and a cluster secret (test_auth.py's
``secured``); then a plain Kafka consumer joins their group with a kiq-like client.id
(``kiq|n9|http://127.0.0.1:PORT``) and is assigned partitions. Behind that URL, an HTTP
server records everything it is sent and answers everything with forged values, sealed
as well as it can without the secret. Every key is then read through both nodes:
each answer is the true value (from a standby) or a 503, never the impostor's; the
impostor is sent no caller's token, nothing but the challenge that would prove it a
member; the nodes say so once in their logs.

Then nothing points a caller at it either: neither node's ``/v1/metadata`` names its
URL, no ``?redirect=true`` answers 307 to it, and ``kiq.client`` holding an admin token
(the seeds: both nodes) reads every key and never sends it a request, let alone the token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest
from confluent_kafka import Consumer

from kiq.client import Client, Unavailable
from kiq.partitioning import partition_for
from kiq.peers.wire import (
    INTERNAL_HELLO,
    LookupResult,
    MultigetResult,
    Outcome,
    ScanResult,
    encode,
)
from tests.integration.test_auth import (  # noqa: F401
    KEYS,
    PARTITIONS,
    bearer,
    secured,
    token,
)

pytestmark = pytest.mark.integration

FORGED = b'{"forged":true}'


class Impostor(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        if self.path == INTERNAL_HELLO:
            payload = body  # the challenge back, with a tag it cannot compute
        elif self.path.startswith("/v1/internal/lookups"):
            payload = encode([LookupResult(Outcome.FOUND, 0, 0, False, b"n9", 1, FORGED)] * 64)
        elif self.path.startswith("/v1/internal/multiget"):
            payload = encode(MultigetResult([(k.encode(), FORGED) for k in KEYS], []))
        elif self.path.startswith("/v1/internal/scan"):
            payload = encode(ScanResult([(k.encode(), FORGED) for k in KEYS]))
        else:
            payload = b"{}"
        payload += b"\0" * 32
        self.send_response(200)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[str]:
    Impostor.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def join_group(
    bootstrap: str,
    group: str,
    topic: str,
    url: str,
    stop: threading.Event,
    taken: set[int] | None = None,
) -> None:
    """A group member claiming ``kiq|n9|url``; ``taken``: the partitions it holds now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"kiq|n9|{url}",
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            consumer.poll(0.2)
            if taken is not None:
                held = {tp.partition for tp in consumer.assignment()}
                taken.intersection_update(held)
                taken.update(held)
    finally:
        consumer.close()


def test_a_group_member_without_the_secret_gets_no_token_and_is_never_believed(
    secured,  # noqa: F811  (the fixture of test_auth.py)
    impostor: str,
):
    cluster, jwt_secret, _ = secured
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    topic = cluster.tables[0].partition("=")[2]
    stop = threading.Event()
    taken: set[int] = set()
    member = threading.Thread(
        target=join_group, args=(cluster.bootstrap, cluster.name, topic, impostor, stop, taken)
    )
    member.start()
    try:
        deadline = time.monotonic() + 60
        seen_by = set()  # the nodes whose view has the impostor (named, or named unproven)
        while (not taken or len(seen_by) < 2) and time.monotonic() < deadline:
            for node in (n1, n2):
                meta = node.metadata()
                if "n9" in meta.get("unproven", ()) or any(n["id"] == "n9" for n in meta["nodes"]):
                    seen_by.add(node.node_id)
            time.sleep(0.3)
        assert taken, "the impostor was never assigned a partition"
        assert len(seen_by) == 2, f"the impostor is in the view of {seen_by} only"
        time.sleep(2)  # the standbys of its partitions settle

        caller = token(jwt_secret)
        statuses: dict[int, int] = {}
        for node in (n1, n2):
            with httpx.Client(base_url=node.url, timeout=10) as client:
                for key in KEYS:
                    r = client.get(f"/v1/tables/kv/keys/{key}", headers=bearer(caller))
                    assert r.status_code in (200, 503), (key, r.text)
                    assert b"forged" not in r.content
                    if r.status_code == 200:
                        assert r.json() == {"k": key}
                        assert r.headers["x-kiq-served-by"] in ("n1", "n2")
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                many = client.post(
                    "/v1/tables/kv/multiget", json={"keys": KEYS}, headers=bearer(caller)
                )
                assert b"forged" not in many.content
                page = client.get("/v1/tables/kv/range?limit=1000", headers=bearer(caller))
                assert b"forged" not in page.content
        assert statuses.get(200, 0) >= len(KEYS), statuses  # most keys still answered

        admin = token(jwt_secret, scope="kiq:read kiq:admin")  # metadata and keys
        _metadata_never_names(impostor, (n1.url, n2.url), admin)
        _redirects_never_go_to(impostor, (n1.url, n2.url), caller, taken)
        _the_client_never_sends_it_anything(impostor, [n1.url, n2.url], admin)

        assert Impostor.seen, "no node ever tried the impostor"
        for method, path, headers in Impostor.seen:
            assert "authorization" not in headers, path
            assert all(caller not in value and admin not in value for value in headers.values())
            assert path in (INTERNAL_HELLO, "/v1/health/live"), (method, path)
        logs = n1.log_file.read_text() + n2.log_file.read_text()
        assert "peer refused: not proven a cluster member url=" + impostor in logs
        assert logs.count("peer refused: not proven a cluster member url=" + impostor) <= 2
    finally:
        stop.set()
        member.join(timeout=30)


def _metadata_never_names(impostor: str, nodes: tuple[str, ...], admin: str) -> None:
    """Neither node's metadata (plain, or with every replica's state) names the impostor's
    URL; both say they have not proven ``n9``."""
    for url in nodes:
        for target in ("/v1/metadata", "/v1/metadata?cluster=true"):
            r = httpx.get(url + target, headers=bearer(admin), timeout=10)
            assert r.status_code == 200, (url, target, r.text)
            assert impostor not in r.text, (url, target)
            assert r.json()["unproven"] == ["n9"], (url, target)
            for part in r.json()["tables"]["kv"]["partitions"]:
                assert {part["active"], *part["standbys"], *part["urls"]} <= {"n1", "n2", None}


def _redirects_never_go_to(
    impostor: str, nodes: tuple[str, ...], caller: str, taken: set[int]
) -> None:
    """50 redirected lookups, over keys of every partition, through both nodes (spread over
    a few seconds: past the penalty a refused member serves after each refusal): a 307
    names n1 or n2, never the impostor; the impostor's partitions are read where they are."""
    keys = KEYS[::4]
    assert len(keys) == 50
    partitions = {partition_for(key, PARTITIONS) for key in keys}
    assert partitions == set(range(PARTITIONS)) and taken <= partitions
    redirected = 0
    for i, key in enumerate(keys):
        url = nodes[i % 2]
        r = httpx.get(
            f"{url}/v1/tables/kv/keys/{key}?redirect=true", headers=bearer(caller), timeout=10
        )
        if r.status_code == 307:
            location = r.headers["location"]
            assert not location.startswith(impostor), (key, location)
            assert location.startswith(tuple(n for n in nodes if n != url)), (key, location)
            redirected += 1
        else:
            assert r.status_code in (200, 503), (key, r.status_code, r.text)
            assert b"forged" not in r.content
            if r.status_code == 200:
                assert r.json() == {"k": key}
        time.sleep(0.06)
    assert redirected, "no lookup was redirected to the other node"


def _the_client_never_sends_it_anything(impostor: str, seeds: list[str], admin: str) -> None:
    """``kiq.client`` with an admin token reads the metadata and every key: it learns no
    URL but n1's and n2's, and the impostor is sent nothing by it."""
    before = len(Impostor.seen)
    with Client(seeds, token=admin, timeout_s=10) as kiq:
        kiq.refresh()
        assert kiq._core.router.topology is not None, "the client read no metadata"
        assert impostor not in kiq._core.router.topology.all_urls()
        assert impostor not in str(kiq.metadata())
        answered = 0
        for key in KEYS:
            try:
                value = kiq.get("kv", key)
            except Unavailable:
                continue  # its partition's standby is restoring: a 503, as through a node
            assert value == {"k": key}
            answered += 1
        assert answered >= len(KEYS) // 2
        many = kiq.multiget("kv", KEYS)
        assert set(many.found) <= set(KEYS) and len(many.found) >= len(KEYS) // 2
        assert all(value == {"k": key} for key, value in many.found.items())
    client_side = Impostor.seen[before:]
    assert all(path == INTERNAL_HELLO for _, path, _ in client_side), client_side

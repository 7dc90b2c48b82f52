"""A process that joins the serving group as a kiq node, without the cluster secret.

Two real ``kiq serve`` nodes with ``--auth jwt`` and a cluster secret (test_auth.py's
``secured``); then a plain Kafka consumer joins their group with a kiq-like client.id
(``kiq|n9|http://127.0.0.1:PORT``) and is assigned partitions. Behind that URL, an HTTP
server records everything it is sent and answers everything with forged values, sealed
as well as it can without the secret. Every key is then read through both nodes:
each answer is the true value (from a standby) or a 503, never the impostor's; the
impostor is sent no caller's token, nothing but the challenge that would prove it a
member; the nodes say so once in their logs.
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

from kiq.routing.wire import (
    INTERNAL_HELLO,
    LookupResult,
    MultigetResult,
    Outcome,
    ScanResult,
    encode,
)
from tests.integration.test_auth import KEYS, bearer, secured, token  # noqa: F401

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


def join_group(bootstrap: str, group: str, topic: str, url: str, stop: threading.Event) -> None:
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
    member = threading.Thread(
        target=join_group, args=(cluster.bootstrap, cluster.name, topic, impostor, stop)
    )
    member.start()
    try:
        deadline = time.monotonic() + 60
        taken: set[int] = set()
        while not taken and time.monotonic() < deadline:
            for node in (n1, n2):
                parts = node.metadata()["tables"]["kv"]["partitions"]
                taken |= {p["partition"] for p in parts if p["active"] == "n9"}
            time.sleep(0.3)
        assert taken, "the impostor was never assigned a partition"
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

        assert Impostor.seen, "no node ever tried the impostor"
        for method, path, headers in Impostor.seen:
            assert "authorization" not in headers, path
            assert all(caller not in value for value in headers.values()), path
            assert path in (INTERNAL_HELLO, "/v1/health/live"), (method, path)
        logs = n1.log_file.read_text() + n2.log_file.read_text()
        assert "peer refused: not proven a cluster member url=" + impostor in logs
        assert logs.count("peer refused: not proven a cluster member url=" + impostor) <= 2
    finally:
        stop.set()
        member.join(timeout=30)

"""`kiq proxy` (a real process) in front of real nodes with --auth jwt: what it admits is
bounded before a body is read, each caller keeps its own per-address budget at the nodes
(the proxy seals the caller's address with the cluster secret), and no credential reaches
a member no trusted node vouches for (the impostor of test_impostor.py)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from kiq.runtime import processes
from kiq.runtime.ports import free_port
from tests.integration.test_auth import KEYS, bearer, secured, token  # noqa: F401
from tests.integration.test_impostor import (  # noqa: F401
    FORGED,
    Impostor,
    impostor,
    join_group,
)

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
MAX_REQUESTS = 8


@contextmanager
def proxy_process(
    nodes: Sequence[str],
    log_file: Path,
    secret_file: Path | None = None,
    token: str | None = None,
) -> Iterator[tuple[str, int]]:
    """A proxy process (URL, pid) as ``kiq proxy`` runs it, with small limits and, given
    ``secret_file``, sealing its callers' addresses."""
    port = free_port()
    script = (
        "import sys, uvloop\n"
        "from pathlib import Path\n"
        "from kiq.proxy import CallerSeal, ProxyApp, ProxyLimits, serve_proxy\n"
        "nodes, port, secret, own = sys.argv[1].split(','), int(sys.argv[2]), sys.argv[3], "
        "sys.argv[4]\n"
        "seal = CallerSeal.from_file(Path(secret)) if secret else None\n"
        f"limits = ProxyLimits(max_requests={MAX_REQUESTS})\n"
        "app = ProxyApp(nodes, token=own or None, limits=limits, callers=seal)\n"
        "uvloop.run(serve_proxy(app, '127.0.0.1', port))\n"
    )
    args = [",".join(nodes), str(port), str(secret_file or ""), token or ""]
    proc = processes.spawn([sys.executable, "-c", script, *args], log_file=log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_file.read_text()
            try:
                if httpx.get(f"{url}/v1/health/live", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_file.read_text()
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            processes.stop(proc, grace_s=10)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def from_address(address: str) -> httpx.Client:
    """A client whose connections leave from ``address`` (any of 127/8 is this machine)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def upload(port: int, declared: int, sent: int, opened: list[socket.socket]) -> None:
    """A POST declaring ``declared`` bytes and sending ``sent`` of them, left open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    opened.append(sock)
    head = f"POST /v1/tables/kv/multiget HTTP/1.1\r\nhost: x\r\ncontent-length: {declared}\r\n\r\n"
    try:
        sock.sendall(head.encode())
        sock.sendall(b"x" * sent)
    except OSError:
        pass  # refused unread: the proxy closed the connection


@pytest.fixture
def few_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nodes started after this refuse an address after 10 bad tokens (1 more each 100 s:
    none while the proxy retries a 429, which it does for a few seconds)."""
    monkeypatch.setenv("KIQ_LIMITS_AUTH_FAILURE_BURST", "10")
    monkeypatch.setenv("KIQ_LIMITS_AUTH_FAILURE_RATE", "0.01")


def test_each_caller_has_its_own_budget_and_bodies_are_bounded_before_they_are_read(
    few_failures: None,
    secured,  # noqa: F811  (the fixture of test_auth.py)
    tmp_path: Path,
):
    cluster, jwt_secret, cluster_secret = secured
    secret_file = tmp_path / "proxy-cluster.secret"
    secret_file.write_text(cluster_secret)
    n1 = cluster.nodes["n1"]
    # No token of its own: every call goes to n1 (which forwards), the one node counting.
    with proxy_process([n1.url], tmp_path / "proxy.log", secret_file) as (url, pid):
        port = int(url.rsplit(":", 1)[1])

        # Two callers through one proxy: one's junk tokens do not refuse the other.
        with from_address("127.0.0.2") as junk, from_address("127.0.0.3") as good:
            statuses = []
            for i in range(100):
                r = junk.get(f"{url}/v1/tables/kv/keys/{KEYS[i % 50]}", headers=bearer(f"j{i}"))
                statuses.append(r.status_code)
                if r.status_code == 429:
                    break
            assert statuses[-1] == 429 and set(statuses) == {401, 429}, statuses
            fresh = bearer(token(jwt_secret, sub="bob"))  # never verified before
            started = time.monotonic()
            r = good.get(f"{url}/v1/tables/kv/keys/{KEYS[0]}", headers=fresh)
            assert r.status_code == 200, r.text
            assert time.monotonic() - started < 2, "the proxy waited out another's refusal"
            assert r.json() == {"k": KEYS[0]}

        # 24 uploads declaring 15 MiB, 14 MiB sent, left open: refused unread.
        before = rss_mib(pid)
        opened: list[socket.socket] = []
        senders = [
            threading.Thread(target=upload, args=(port, 15 * MiB, 14 * MiB, opened))
            for _ in range(24)
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(30)
        grown = rss_mib(pid) - before
        for sock in opened:
            sock.close()
        assert grown < 64, f"the proxy's RSS grew {grown:.0f} MiB for bodies it should refuse"

        # Requests past the limit: 503 with Retry-After, before their bodies are read.
        held: list[socket.socket] = []
        for _ in range(MAX_REQUESTS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(
                b"POST /v1/tables/kv/multiget HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
            )
            held.append(sock)
        time.sleep(0.5)
        past = httpx.get(f"{url}/v1/tables/kv/keys/{KEYS[1]}", timeout=10)
        assert past.status_code == 503 and past.headers["retry-after"] == "1", past.text
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/v1/health/live", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the proxy never took requests again"
            time.sleep(0.1)


def test_no_credential_reaches_an_impostor_through_the_proxy(
    secured,  # noqa: F811
    impostor: str,  # noqa: F811
    tmp_path: Path,
):
    cluster, jwt_secret, _ = secured
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    topic = cluster.tables[0].partition("=")[2]
    stop = threading.Event()
    member = threading.Thread(
        target=join_group, args=(cluster.bootstrap, cluster.name, topic, impostor, stop)
    )
    member.start()
    own = token(jwt_secret, sub="proxy", scope="kiq:admin")
    caller = token(jwt_secret)
    try:
        deadline = time.monotonic() + 60
        joined = False  # a node names it as a member, or says it left it out unproven
        while not joined and time.monotonic() < deadline:
            for node in (n1, n2):
                view = httpx.get(f"{node.url}/v1/metadata", headers=bearer(own), timeout=10).json()
                parts = view["tables"]["kv"]["partitions"]
                joined |= "n9" in view.get("unproven", ())
                joined |= any(p["active"] == "n9" for p in parts)
            time.sleep(0.3)
        assert joined, "the impostor never joined the group"
        time.sleep(2)  # the standbys of its partitions settle

        proxied = proxy_process([n1.url, n2.url], tmp_path / "proxy.log", token=own)
        with proxied as (url, _), httpx.Client(base_url=url, timeout=30) as http:
            for key in KEYS:
                r = http.get(f"/v1/tables/kv/keys/{key}", headers=bearer(caller))
                assert r.status_code in (200, 503), (key, r.text)
                assert FORGED not in r.content
            many = http.post("/v1/tables/kv/multiget", json={"keys": KEYS}, headers=bearer(caller))
            assert FORGED not in many.content
            page = http.get("/v1/tables/kv/range?limit=1000", headers=bearer(caller))
            assert FORGED not in page.content
        for method, path, headers in Impostor.seen:
            assert "authorization" not in headers, (method, path)
            assert all(caller not in v and own not in v for v in headers.values()), path
    finally:
        stop.set()
        member.join(timeout=30)

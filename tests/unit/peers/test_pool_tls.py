"""The peer pool over TLS: a verified handshake once per connection, a wrong CA refused."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import uvloop

from kiq.peers.pool import ConnectionPool
from kiq.security.tls import client_context
from tests.certs import Certs, make_certs
from tests.unit.peers.servers import read_request

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def with_tls_server(certs: Certs, scenario) -> list[int]:
    """Runs ``scenario(port)`` against a TLS server answering 200s; returns connections per peer."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(certs.cert, certs.key)
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                await read_request(reader)
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_ctx)
        try:
            await scenario(server.sockets[0].getsockname()[1])
        finally:
            server.close()

    uvloop.run(main())
    return connections


def test_requests_over_tls_reuse_one_verified_connection(certs: Certs):
    async def scenario(port: int) -> None:
        pool = ConnectionPool(ssl_context=client_context(certs.ca))
        try:
            for _ in range(3):
                assert await pool.request(
                    f"https://127.0.0.1:{port}", "GET", "/x", b"", {}, 2.0
                ) == (
                    200,
                    b"ok",
                )
        finally:
            pool.close()

    assert len(with_tls_server(certs, scenario)) == 1


def test_a_peer_signed_by_another_ca_is_refused(certs: Certs, tmp_path: Path):
    other = make_certs(tmp_path / "other")

    async def scenario(port: int) -> None:
        pool = ConnectionPool(ssl_context=client_context(other.ca))
        try:
            with pytest.raises(
                ConnectionError, match=r"TLS with 127.0.0.1:.* failed: .*CERTIFICATE_VERIFY_FAILED"
            ):
                await pool.request(f"https://127.0.0.1:{port}", "GET", "/x", b"", {}, 2.0)
        finally:
            pool.close()

    with_tls_server(certs, scenario)


def test_plain_http_to_a_tls_port_gets_no_answer(certs: Certs):
    async def scenario(port: int) -> None:
        pool = ConnectionPool()
        try:
            with pytest.raises(ConnectionError):
                await pool.request(f"http://127.0.0.1:{port}", "GET", "/x", b"", {}, 1.0)
        finally:
            pool.close()

    with_tls_server(certs, scenario)

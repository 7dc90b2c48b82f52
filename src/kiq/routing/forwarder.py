"""Requests to other nodes over pooled keep-alive HTTP connections.

A forwarded request carries ``X-Kiq-Forwarded`` (so the receiver answers from its
own replica or says 421, and never forwards again) and the caller's
Authorization header.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from kiq.routing.peers import PeerClient

FORWARDED = "x-kiq-forwarded"
PASSED_HEADERS = ("x-kiq-partition", "x-kiq-offset", "x-kiq-served-by", "x-kiq-lag",
                  "x-kiq-stale", "content-type")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]


class Forwarder:
    def __init__(self, node_id: str, timeout_ms: int) -> None:
        self._node_id = node_id
        self._timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000, connect=0.5)
        self._session: aiohttp.ClientSession | None = None
        self._peers = PeerClient(connect_timeout_s=0.5)
        self._forwarded_headers = {FORWARDED: node_id}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=256, keepalive_timeout=30, ttl_dns_cache=300
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )  # fmt: skip

    async def close(self) -> None:
        self._peers.close()
        if self._session is not None:
            await self._session.close()

    async def post_internal(
        self, base_url: str, path: str, body: bytes, content_type: str,
        authorization: str | None = None, extra_timeout_s: float = 0.0,
    ) -> Reply:  # fmt: skip
        """A node-to-node POST on the lean client (``peers``); aiohttp for https peers."""
        if not base_url.startswith("http://"):
            return await self.send(
                "POST", base_url + path, authorization, body, extra_timeout_s, content_type
            )
        headers = self._forwarded_headers
        if authorization:
            headers = {**headers, "authorization": authorization}
        timeout_s = (self._timeout.total or 0) + extra_timeout_s
        try:
            status, payload = await self._peers.post(
                base_url, path, body, content_type, headers, timeout_s
            )
        except ConnectionError as exc:
            raise ConnectionError(f"{base_url}{path}: {exc}") from exc
        return Reply(status, payload, [])

    async def send(
        self, method: str, url: str, authorization: str | None = None,
        body: bytes | None = None, extra_timeout_s: float = 0.0,
        content_type: str = "application/json",
    ) -> Reply:  # fmt: skip
        """One request; raises ``ConnectionError`` when the node cannot be reached in time."""
        assert self._session is not None, "Forwarder.start() was not awaited"
        headers = {FORWARDED: self._node_id}
        if authorization:
            headers["Authorization"] = authorization
        if body is not None:
            headers["Content-Type"] = content_type
        timeout = self._timeout
        if extra_timeout_s:
            timeout = aiohttp.ClientTimeout(
                total=self._timeout.total + extra_timeout_s, connect=self._timeout.connect
            )
        try:
            async with self._session.request(
                method, url, data=body, headers=headers, timeout=timeout
            ) as resp:
                payload = await resp.read()
                out = [
                    (name.encode(), resp.headers[name].encode())
                    for name in PASSED_HEADERS if name in resp.headers
                ]  # fmt: skip
                return Reply(resp.status, payload, out)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ConnectionError(f"{url}: {exc.__class__.__name__}: {exc}") from exc

"""kiq's one HTTP client, for every request but a lookup between peers.

The proxy and a read worker relay requests to nodes; the CLI and the local runtime ask
nodes, the Spark master's UI and a Maven repository. They all get their clients here, so
every such request carries a User-Agent naming kiq, a timeout its caller chose, TLS
verification (httpx's roots, or a context from ``kiq.security.tls.client_context``),
redirects followed only where asked, and fails with one error, ``HttpError``, that names
the request and what to check. Only the peer pool (``kiq.peers.pool``) and the public
client (``kiq.client``, which imports nothing of the serving side) make requests otherwise.

The names of httpx's types a relay handles (requests, responses, transports) are given
here too, so no module outside this one imports an HTTP library.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

from kiq.errors import KiqError

__all__ = [
    "URL",
    "USER_AGENT",
    "AsyncClient",
    "AsyncTransport",
    "Client",
    "ConnectError",
    "Gate",
    "HttpError",
    "Request",
    "Response",
    "Timeout",
    "Transport",
    "TransportError",
    "Verify",
    "async_client",
    "async_transport",
    "get",
    "send",
    "send_stream",
    "ssl_context",
    "stream",
    "sync_client",
    "system_roots",
]

AsyncClient = httpx.AsyncClient
AsyncTransport = httpx.AsyncBaseTransport
Client = httpx.Client
Request = httpx.Request
Response = httpx.Response
Timeout = httpx.Timeout
Transport = httpx.BaseTransport
URL = httpx.URL
# What a request that got no answer raises (``Gate``), and what the client's retry loop
# catches (``kiq.client.calls.read``): the proxy's pooled relay raises it too.
ConnectError = httpx.ConnectError
TransportError = httpx.TransportError
# An SSL context, True (httpx's own roots) or False (no verification).
Verify = ssl.SSLContext | bool


def _user_agent() -> str:
    try:
        return f"kiq/{version('kiq')}"
    except PackageNotFoundError:  # a source tree that was never installed
        return "kiq"


USER_AGENT = _user_agent()


class HttpError(KiqError):
    """A request got no answer: the method and URL, why, and what to check (``hint``).

    ``reason`` is the underlying failure's own text; ``timed_out`` tells a slow peer from
    one that cannot be reached."""

    def __init__(
        self, method: str, url: str, reason: str, *, timed_out: bool = False, hint: str = ""
    ) -> None:
        self.method = method
        self.url = url
        self.reason = reason
        self.timed_out = timed_out
        what = "no answer in time" if timed_out else f"no answer ({reason})"
        super().__init__(f"{method} {url}: {what}" + (f"; {hint}" if hint else ""))

    @classmethod
    def of(cls, exc: httpx.HTTPError, method: str, url: str, hint: str = "") -> HttpError:
        with suppress(RuntimeError):  # raised when no request was made
            url = str(exc.request.url)  # a base URL's joined, the query included
        reason = str(exc) or type(exc).__name__
        timed_out = isinstance(exc, httpx.TimeoutException)
        return cls(method, url, reason, timed_out=timed_out, hint=hint)


@cache
def _httpx_roots() -> ssl.SSLContext:
    """httpx's default verification, made once: making it loads the CA bundle (~50 ms)."""
    return httpx.create_ssl_context()


@cache
def system_roots() -> ssl.SSLContext:
    """The system's CA roots, as Python's own ``ssl`` and ``urllib`` verify with."""
    return ssl.create_default_context()


def _verify(verify: Verify) -> Verify:
    return _httpx_roots() if verify is True else verify


def ssl_context(verify: Verify) -> ssl.SSLContext | None:
    """What this module's clients verify with, for a connection pool of kiq's own (the
    proxy's relay); None for ``False``, no verification, which such a pool does not do."""
    verified = _verify(verify)
    return verified if isinstance(verified, ssl.SSLContext) else None


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {"User-Agent": USER_AGENT, **(headers or {})}


def sync_client(
    *,
    timeout: float | Timeout,
    base_url: str = "",
    headers: Mapping[str, str] | None = None,
    verify: Verify = True,
    follow_redirects: bool = False,
    transport: Transport | None = None,
) -> Client:
    """A blocking client; ``transport``: tests' stand-ins (an ``httpx.MockTransport``)."""
    return httpx.Client(
        base_url=base_url,
        headers=_headers(headers),
        timeout=timeout,
        verify=_verify(verify),
        follow_redirects=follow_redirects,
        transport=transport,
    )


def async_transport(
    *,
    max_connections: int | None,
    max_keepalive: int,
    verify: Verify = True,
    uds: str | None = None,
) -> AsyncTransport:
    """A connection pool to wrap (``Gate``) or hand to ``async_client``; ``uds``: a Unix
    socket's path, every request sent there whatever its URL."""
    return httpx.AsyncHTTPTransport(
        verify=_verify(verify),
        uds=uds,
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive
        ),
    )


def async_client(
    *,
    transport: AsyncTransport,
    timeout: float | Timeout,
    base_url: str = "",
    follow_redirects: bool = False,
) -> AsyncClient:
    """An async client over ``transport`` (``async_transport``, maybe behind a ``Gate``)."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers=_headers(None),
        timeout=timeout,
        follow_redirects=follow_redirects,
        transport=transport,
    )


def send(
    client: Client,
    method: str,
    url: str,
    *,
    params: Mapping[str, str] | None = None,
    json: Any = None,
    hint: str = "",
) -> Response:
    """One request on ``client`` (``json``: the body, as JSON): the answer whatever its
    status; an ``HttpError`` (with ``hint``) when none came."""
    try:
        return client.request(method, url, params=params, json=json)
    except httpx.RequestError as exc:
        raise HttpError.of(exc, method, url, hint) from exc


async def send_stream(client: AsyncClient, request: Request) -> Response:
    """``request`` sent, its answer's body left to stream (``aiter_raw``, then ``aclose``);
    an ``HttpError`` when no answer came."""
    try:
        return await client.send(request, stream=True)
    except httpx.RequestError as exc:
        raise HttpError.of(exc, request.method, str(request.url)) from exc


def get(
    url: str,
    *,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    verify: Verify = True,
    follow_redirects: bool = True,
    hint: str = "",
) -> Response:
    """One ``GET``, its body read: the answer whatever its status; an ``HttpError`` (with
    ``hint``) when none came."""
    with stream(
        url,
        timeout_s=timeout_s,
        headers=headers,
        verify=verify,
        follow_redirects=follow_redirects,
        hint=hint,
    ) as response:
        response.read()
        return response


@contextmanager
def stream(
    url: str,
    *,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    verify: Verify = True,
    follow_redirects: bool = True,
    hint: str = "",
) -> Iterator[Response]:
    """One ``GET`` whose body is read in the ``with`` block (``iter_bytes``); a failure
    before or while reading it is an ``HttpError`` (with ``hint``)."""
    with sync_client(
        timeout=timeout_s, headers=headers, verify=verify, follow_redirects=follow_redirects
    ) as client:
        try:
            with client.stream("GET", url) as response:
                yield response
        except httpx.RequestError as exc:
            raise HttpError.of(exc, "GET", url, hint) from exc


class Gate(AsyncTransport):
    """``inner`` for the requests ``admit`` lets through, as a peer that does not answer
    (a connection error, before any is made) for the others."""

    def __init__(self, inner: AsyncTransport) -> None:
        self._inner = inner

    def admit(self, request: Request) -> str | None:
        """Why ``request`` may not go (None: it goes); may set its headers."""
        return None

    async def handle_async_request(self, request: Request) -> Response:
        refusal = self.admit(request)
        if refusal is not None:
            raise httpx.ConnectError(refusal, request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

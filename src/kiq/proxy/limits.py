"""What the proxy lets in, decided before it reads a byte of a body.

Three fences, each answered at once:

- **requests at once** (``max_requests``, watches also ``max_streams``): past it, 503 with
  ``Retry-After`` before anything is read; granian's own ``backpressure``
  (``max_connections``, ``server.py``) holds further connections in the backlog;
- **body size by method** (``body_cap``): GET, HEAD, DELETE and OPTIONS carry none worth
  the name (``max_small_body_bytes``), the others at most a node's own
  ``[limits] max_body_bytes`` (4 MiB by default): a larger ``Content-Length`` is 413
  unread, a body without one is 413 once it passes the cap;
- **bytes in flight** (``max_in_flight_bytes``) across all requests: a body's declared
  length is reserved before it is read (a body without one, chunk by chunk), and a
  request that would pass the total is 503 with ``Retry-After``. So however many
  callers send at once, bodies held by the proxy stay under this bound.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from kiq.settings import LimitsSettings

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

_BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
_CONTENT_LENGTH = b"content-length"


@dataclass(frozen=True)
class ProxyLimits:
    max_body_bytes: int = LimitsSettings().max_body_bytes  # a node takes no more
    max_small_body_bytes: int = 16 * 1024  # GET, HEAD, DELETE, OPTIONS
    max_in_flight_bytes: int = 64 * 1024 * 1024  # request bodies held, all together
    max_requests: int = 1024  # in progress at once, watches included
    max_streams: int = 512  # watches relayed at once: they never end by themselves
    max_connections: int = 2048  # granian's backpressure: more wait in the backlog
    retry_after_s: float = 1.0

    def __post_init__(self) -> None:
        if min(self.max_body_bytes, self.max_in_flight_bytes, self.max_requests) < 1:
            raise ValueError("the proxy's limits must be positive")
        if self.max_streams < 1 or self.max_connections < 1 or self.max_small_body_bytes < 0:
            raise ValueError("the proxy's limits must be positive")

    def body_cap(self, method: str) -> int:
        return self.max_small_body_bytes if method in _BODYLESS else self.max_body_bytes

    @property
    def retry_after(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


class RequestRefused(Exception):
    """A request the proxy will not take: ``status`` and the error's code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Admission:
    """The counters behind ``ProxyLimits``: requests and watches open, body bytes held.

    Used from the event loop only (one proxy process), so plain ints suffice."""

    def __init__(self, limits: ProxyLimits) -> None:
        self.limits = limits
        self.requests = 0
        self.streams = 0
        self.in_flight = 0
        self.refused = 0

    def enter(self, stream: bool) -> None:
        limits = self.limits
        if self.requests >= limits.max_requests:
            raise self._busy("has too many requests open")
        if stream and self.streams >= limits.max_streams:
            raise self._busy("relays too many watches")
        self.requests += 1
        self.streams += stream

    def leave(self, stream: bool) -> None:
        self.requests -= 1
        self.streams -= stream

    def take(self, size: int) -> None:
        """Reserves ``size`` body bytes, or refuses the request (503)."""
        if self.in_flight + size > self.limits.max_in_flight_bytes:
            raise self._busy("holds too many request bodies")
        self.in_flight += size

    def give(self, size: int) -> None:
        self.in_flight -= size

    def _busy(self, why: str) -> RequestRefused:
        self.refused += 1
        return RequestRefused(503, "unavailable", f"the proxy {why}: try again in a moment")


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The request's ``Content-Length``; None when it has none; 400 when it is not a number."""
    for name, value in headers:
        if name == _CONTENT_LENGTH:
            text = value.strip()
            if not text.isdigit() or len(text) > 18:
                raise RequestRefused(400, "bad_request", "Content-Length is not a length")
            return int(text)
    return None


class Body:
    """A request's body read under its caps, its bytes reserved in ``admission`` until
    ``release``."""

    def __init__(self, admission: Admission, method: str, headers: list[tuple[bytes, bytes]]):
        self._admission = admission
        self._headers = headers
        self.cap = admission.limits.body_cap(method)
        self.declared: int | None = None
        self.held = 0

    def check(self) -> None:
        """Before a byte is read: a declared length over the cap (413) or over what may be
        held now (503)."""
        self.declared = declared_length(self._headers)
        if self.declared is not None:
            if self.declared > self.cap:
                raise _too_large(self.cap)
            self._admission.take(self.declared)
            self.held = self.declared

    async def read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.cap or (self.declared is not None and size > self.declared):
                raise _too_large(self.cap)
            if size > self.held:  # no length declared: reserve as it comes
                self._admission.take(size - self.held)
                self.held = size
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def release(self) -> None:
        self._admission.give(self.held)
        self.held = 0


def _too_large(cap: int) -> RequestRefused:
    return RequestRefused(413, "too_large", f"the request body is larger than {cap} bytes")

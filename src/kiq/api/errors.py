"""API errors, and the one place any exception becomes an HTTP status and a JSON body.

    KiqError (kiq.errors)                       retriable  owner_moved
    └── ApiError           500 internal             -          -
        ├── BadRequest     400 bad_request          -          -
        ├── Unauthorized   401 unauthorized         -          -   no bearer token
        │   └── InvalidToken  401 invalid_token     -          -   a token we do not accept
        ├── Forbidden      403 forbidden            -          -
        │   ├── InsufficientScope 403 insufficient_scope          a valid token without the scope
        │   └── NotClusterMember  403 not_cluster_member          /v1/internal/* without a
        │                                                         valid cluster credential
        ├── UnknownTable   404 unknown_table        -          -
        ├── KeyNotFound    404 not_found            -          -
        ├── NoRoute        404 no_route             -          -
        ├── TooLarge       413 too_large            -          -
        ├── NotHere        421 not_here             yes        yes
        ├── RateLimited    429 rate_limited         yes        -   (+ Retry-After)
        └── Unavailable    503 unavailable          yes        -

A lookup without a value says why as an outcome (``routing.wire.Outcome``), which
``lookup_error`` turns into one of these, and nothing else does.

``error_response`` answers for every route, the raw lookup path included: an
``ApiError`` as itself, another retriable ``KiqError`` as a 503, anything else as a
logged 500 whose body says nothing about the code. An ``ApiError`` may add
response headers (``headers``: the 401s' and 403s' ``WWW-Authenticate``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

from kiq.api.asgi import JSON, Headers, Send, respond
from kiq.errors import KiqError
from kiq.routing.wire import LookupResult, Outcome
from kiq.security import read_scope
from kiq.tables.versions import public_name

log = logging.getLogger(__name__)


class ApiError(KiqError):
    status = 500
    code = "internal"
    headers: Headers = ()  # sent with the answer besides the content type

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> bytes:
        return orjson.dumps({"error": self.code, "message": self.message, **self.details})


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    """No bearer token where one is needed (RFC 6750: a bare ``Bearer`` challenge)."""

    status, code = 401, "unauthorized"
    headers = ((b"www-authenticate", b'Bearer realm="kiq"'),)


class InvalidToken(Unauthorized):
    """A bearer token this node does not accept: malformed, badly signed, expired, not ours."""

    code = "invalid_token"
    headers = ((b"www-authenticate", b'Bearer realm="kiq", error="invalid_token"'),)


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class InsufficientScope(Forbidden):
    """A valid token whose ``scope`` claim lacks ``scope``."""

    code = "insufficient_scope"

    def __init__(self, scope: str) -> None:
        super().__init__(f"the token's scope does not include {scope}", scope=scope)
        quoted = "".join(c for c in scope if " " <= c <= "~" and c not in '"\\')
        challenge = f'Bearer realm="kiq", error="insufficient_scope", scope="{quoted}"'
        self.headers = ((b"www-authenticate", challenge.encode()),)


class NotClusterMember(Forbidden):
    """A node-to-node path asked without a valid cluster credential, whatever else it carries."""

    code = "not_cluster_member"


class UnknownTable(ApiError):
    status, code = 404, "unknown_table"


class KeyNotFound(ApiError):
    status, code = 404, "not_found"


class NoRoute(ApiError):
    status, code = 404, "no_route"


class TooLarge(ApiError):
    status, code = 413, "too_large"


class NotHere(ApiError):
    """This node holds no usable replica; the caller should try the next replica."""

    status, code = 421, "not_here"
    retriable = owner_moved = True


class Unavailable(ApiError):
    """No replica could answer (all down, too far behind, or not caught up in time)."""

    status, code = 503, "unavailable"
    retriable = True


class RateLimited(ApiError):
    """The caller sent more than its rate allows; ``Retry-After`` says when to try again."""

    status, code = 429, "rate_limited"
    retriable = True

    def __init__(self, message: str, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.headers = ((b"retry-after", str(retry_after_s).encode()),)


# Retry-After (s) of a lookup refused because too many wait for min_offset already.
PARKED_RETRY_S = 1


def lookup_error(result: LookupResult, table: str, partition: int, key: bytes) -> ApiError:
    """The HTTP error saying why a lookup has no value: the one place a lookup's outcome
    (``routing.wire.Outcome``, any but FOUND) becomes a status."""
    outcome = result.outcome
    if outcome is Outcome.MISSING:
        return KeyNotFound("no such key", table=table, key=key.decode(), partition=partition)
    if outcome is Outcome.MOVED:
        return NotHere(f"no usable replica of {table}[{partition}] here")
    if outcome is Outcome.UNAVAILABLE:
        return Unavailable(
            result.reason,
            partition=partition,
            applied_offset=result.offset,
            reason="min_offset not reached within wait_ms",
        )
    if outcome is Outcome.BUSY:
        return RateLimited(f"{result.reason}: try again in {PARKED_RETRY_S} s", PARKED_RETRY_S)
    if outcome is Outcome.FORBIDDEN:
        return InsufficientScope(read_scope(public_name(table)))
    if outcome is Outcome.BAD_KEY:
        return BadRequest(result.reason)
    # NO_REPLICA, and FAILED or HEDGED should a caller hand one over as it came
    return Unavailable(
        f"no replica of {table}[{partition}] could answer",
        partition=partition,
        reason=result.reason,
    )


_INTERNAL = ApiError("internal error; the node's log says more").body()


def error_response(exc: Exception, scope: Mapping[str, Any]) -> tuple[int, bytes]:
    """The status and body that answer a request ``exc`` ended."""
    if isinstance(exc, ApiError):
        return exc.status, exc.body()
    if isinstance(exc, KiqError) and exc.retriable:
        # Its message may name paths and hosts: say only what the caller can act on.
        log.info("retriable error method=%s path=%s error=%r", *_where(scope), exc)
        reason = "the partition moved during the request" if exc.owner_moved else type(exc).__name__
        return 503, Unavailable("try again shortly", reason=reason).body()
    log.error("request failed method=%s path=%s", *_where(scope), exc_info=exc)
    return 500, _INTERNAL


async def send_error(send: Send, exc: Exception, scope: Mapping[str, Any]) -> int:
    """Answers with ``error_response`` and returns the status sent."""
    status, body = error_response(exc, scope)
    headers = (JSON, *exc.headers) if isinstance(exc, ApiError) and exc.headers else (JSON,)
    try:
        await respond(send, status, body, headers)
    except Exception:  # e.g. a response had already started: the server closes the connection
        log.warning("could not send the %d answer path=%s", status, scope.get("path"))
    return status


def _where(scope: Mapping[str, Any]) -> tuple[str, str]:
    return scope.get("method", "?"), scope.get("path", "?")

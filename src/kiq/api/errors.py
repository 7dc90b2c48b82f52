"""API errors: the one place any exception becomes an HTTP status and a JSON body.

The error tree (``ApiError`` and its statuses) is ``kiq.http_errors``.

A lookup without a value says why as an outcome (``routing.wire.Outcome``), which
``lookup_error`` turns into one of these, and nothing else does.

``error_response`` answers for every route, the raw lookup path included: an
``ApiError`` as itself, a malformed position token (``kiq.positions.BadPosition``) as a
400, another retriable ``KiqError`` as a 503, anything else as a
logged 500 whose body says nothing about the code. An ``ApiError`` may add
response headers (``headers``: the 401s' and 403s' ``WWW-Authenticate``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kiq.api.asgi import JSON, Send, respond
from kiq.errors import KiqError
from kiq.http_errors import (  # the tree, raised everywhere; answered here
    ApiError as ApiError,
)
from kiq.http_errors import (
    BadRequest as BadRequest,
)
from kiq.http_errors import (
    Forbidden as Forbidden,
)
from kiq.http_errors import (
    InsufficientScope as InsufficientScope,
)
from kiq.http_errors import (
    InvalidToken as InvalidToken,
)
from kiq.http_errors import (
    KeyNotFound as KeyNotFound,
)
from kiq.http_errors import (
    NoRoute as NoRoute,
)
from kiq.http_errors import (
    NotClusterMember as NotClusterMember,
)
from kiq.http_errors import (
    NotHere as NotHere,
)
from kiq.http_errors import (
    RateLimited as RateLimited,
)
from kiq.http_errors import (
    TooLarge as TooLarge,
)
from kiq.http_errors import (
    Unauthorized as Unauthorized,
)
from kiq.http_errors import (
    Unavailable as Unavailable,
)
from kiq.http_errors import (
    UnknownIndex as UnknownIndex,
)
from kiq.http_errors import (
    UnknownTable as UnknownTable,
)
from kiq.peers.wire import LookupResult, Outcome
from kiq.positions import BadPosition
from kiq.security import read_scope
from kiq.tables.versions import public_name

log = logging.getLogger(__name__)


# Retry-After (s) of a lookup refused because too many wait for min_offset already.
PARKED_RETRY_S = 1
# Retry-After (s) of a lookup whose replicas had not applied the offset asked in time
# (``min_offset``, or a position token's: ``kiq.positions``).
BEHIND_RETRY_S = 1
_BEHIND_RETRY = ((b"retry-after", str(BEHIND_RETRY_S).encode()),)


def lookup_error(result: LookupResult, table: str, partition: int, key: bytes) -> ApiError:
    """The HTTP error saying why a lookup has no value: the one place a lookup's outcome
    (``routing.wire.Outcome``, any but FOUND) becomes a status."""
    outcome = result.outcome
    if outcome is Outcome.MISSING:
        return KeyNotFound("no such key", table=table, key=key.decode(), partition=partition)
    if outcome is Outcome.MOVED:
        return NotHere(f"no usable replica of {table}[{partition}] here")
    if outcome is Outcome.UNAVAILABLE:
        # ``lag``: how far the replica was short of the offset asked (-1: a node that did
        # not say); worth trying again shortly, once it caught up.
        behind = {"lag": result.lag} if result.lag > 0 else {}
        unavailable = Unavailable(
            result.reason,
            partition=partition,
            applied_offset=result.offset,
            reason="min_offset not reached within wait_ms",
            **behind,
        )
        unavailable.headers = _BEHIND_RETRY
        return unavailable
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
    if isinstance(exc, BadPosition):  # a caller's token, wherever it was read
        return BadRequest.status, BadRequest(str(exc), reason="bad_position").body()
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

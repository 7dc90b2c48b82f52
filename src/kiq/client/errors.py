"""What a kiq client raises, and the one place an HTTP answer becomes one of them.

    KiqError (kiq.errors)                   retriable  owner_moved
    └── ClientError                             -          -
        ├── BadRequest          400             -          -   fix the call
        ├── AuthError                           -          -
        │   ├── Unauthorized    401             -          -   no token, or one not accepted
        │   └── Forbidden       403             -          -   the token lacks the scope
        ├── NotFound            404             -          -
        │   ├── KeyNotFound     404 not_found   -          -   the table has no such key
        │   └── UnknownTable    404             -          -   the cluster serves no such table
        ├── RateLimited         429             yes        -   after ``retry_after_s``
        ├── Unavailable         503, no answer  yes        yes every replica asked failed
        └── ServerError         5xx, other      -          -   the node's log says more

The client retries what is retriable itself (an idempotent read, with backoff and
the next replica); it raises one of these once its retries are spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kiq.errors import KiqError


class ClientError(KiqError):
    """Root of the client's errors: ``status`` (0: no answer), the node's ``code`` and
    ``details`` (its error body's other fields), the ``url`` asked last."""

    def __init__(
        self,
        message: str,
        status: int = 0,
        code: str = "",
        details: Mapping[str, Any] | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details: Mapping[str, Any] = details or {}
        self.url = url


class BadRequest(ClientError):
    """The node refused the call as malformed (a bad key, parameter or cursor)."""


class AuthError(ClientError):
    """The call's credentials were refused."""


class Unauthorized(AuthError):
    """No bearer token where the cluster needs one, or one it does not accept."""


class Forbidden(AuthError):
    """A valid token that does not grant this (a table's read scope, kiq:admin)."""


class NotFound(ClientError):
    """Nothing answers to what was named."""


class KeyNotFound(NotFound):
    """The table has no value for the key (never written, deleted or expired)."""


class UnknownTable(NotFound):
    """The cluster serves no table of that name."""


class RateLimited(ClientError):
    """The node counts more calls from this caller than its rate allows."""

    retriable = True

    @property
    def retry_after_s(self) -> float:
        value = self.details.get("retry_after_s", 1)
        return float(value) if isinstance(value, int | float) else 1.0


class Unavailable(ClientError):
    """No replica answered: nodes down or moving, too far behind, or ``min_offset`` not
    reached in ``wait_ms``."""

    retriable = True
    owner_moved = True


class ServerError(ClientError):
    """A node failed on the call (5xx) or answered something this client cannot read."""


_BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    413: BadRequest,
    429: RateLimited,
    421: Unavailable,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int, body: bytes, url: str | None = None) -> ClientError:
    """The error a non-2xx answer means, from its status and kiq's error body."""
    try:
        parsed = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        parsed = {}
    fields: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    code = str(fields.pop("error", ""))
    message = str(fields.pop("message", "")) or f"HTTP {status}"
    if status == 404:
        kind: type[ClientError] = (
            KeyNotFound
            if code == "not_found"
            else UnknownTable
            if code == "unknown_table"
            else NotFound
        )
    else:
        kind = _BY_STATUS.get(status, ServerError)
    return kind(message, status, code, fields, url)

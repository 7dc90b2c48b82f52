"""The errors that carry an HTTP status, and the body each is answered with.

    KiqError (kiq.errors)                       retriable  owner_moved
    └── ApiError           500 internal             -          -
        ├── BadRequest     400 bad_request          -          -
        │   └── WireTooNew 400 wire_too_new                     a peer's wire this node cannot read
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

Apart from ``kiq.api`` so that every package that answers over HTTP (the core API, the
operations routes, an application's) raises them without importing the API; where an
exception becomes a response is ``kiq.api.errors``, and only there. An ``ApiError`` may
add response headers (``headers``: the 401s' and 403s' ``WWW-Authenticate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from kiq.errors import KiqError

Headers = Sequence[tuple[bytes, bytes]]


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


class WireTooNew(BadRequest):
    """A node-to-node request in a peer wire newer than this node reads (``kiq.formats``)."""

    code = "wire_too_new"


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


class UnknownIndex(ApiError):
    """A table read by a field it keeps no index of (``GET /v1/tables/{t}/by/{field}``)."""

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

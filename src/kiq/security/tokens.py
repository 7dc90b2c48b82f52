"""Bearer tokens (JWT) checked with PyJWT, and a bounded cache of the answers.

``TokenVerifier.verify`` checks the signature with the configured key and only
the algorithms that key allows (``keys.py``), then ``exp`` (required), ``nbf``,
``aud`` and ``iss``, each time check with a small leeway for clocks that differ.
``TokenCache`` keeps what it found per raw ``Authorization`` value (the header's
bytes as they came, ``Bearer`` and all), so a caller's second request costs a dict
lookup and a clock read, not even a decode: a lookup stays on the fast path.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import jwt

from kiq.security.errors import TokenRejected
from kiq.security.keys import Keys
from kiq.security.scopes import Grants, Principal

# A verified token is re-verified after this long even when it expires later, so a key
# removed from a JWKS file stops its tokens within a minute.
MAX_CACHED_S = 60.0
# A refused token is refused from the cache for this long: a client retrying a bad token
# costs a dict lookup, and a token refused as not yet valid is checked again soon.
REFUSED_CACHED_S = 1.0
MAX_TOKEN_CHARS = 8192


class TokenVerifier:
    def __init__(
        self,
        keys: Keys,
        audience: str | None = None,
        issuer: str | None = None,
        leeway_s: float = 30.0,
    ) -> None:
        self._keys = keys
        self._audience = audience
        self._issuer = issuer
        self.leeway_s = leeway_s
        self._options: Any = {"require": ["exp"], "verify_aud": audience is not None}

    def verify(self, token: str) -> Principal:
        """The caller the token names; ``TokenRejected`` with the reason otherwise."""
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRejected(f"token longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"malformed token: {exc}") from exc
        alg = header.get("alg")
        key, allowed = self._keys.resolve(header)
        if not isinstance(alg, str) or alg not in allowed:
            raise TokenRejected(f"algorithm {alg!r} is not accepted with the configured key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self.leeway_s,
                options=self._options,
            )
        except jwt.PyJWTError as exc:
            raise TokenRejected(_reason(exc)) from exc
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            # Someone to count requests against all the same: this token.
            subject = "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
        return Principal(
            subject, Grants.parse(claims.get("scope")), float(claims["exp"]) + self.leeway_s
        )


def _reason(exc: jwt.PyJWTError) -> str:
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "token expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "token not valid yet (nbf)"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "token not meant for this service (aud)"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "token from another issuer (iss)"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token without the {exc.claim!r} claim"
    return f"invalid token: {exc}"


def bearer_token(authorization: bytes) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header value."""
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        raise TokenRejected("the Authorization header is not 'Bearer TOKEN'")
    return token.strip().decode("latin-1")


class TokenCache:
    """``TokenVerifier.verify`` remembered per raw Authorization value: at most
    ``max_entries``, oldest out first; an entry lasts until the token expires (at most
    ``MAX_CACHED_S``), a refusal ``REFUSED_CACHED_S``."""

    def __init__(
        self,
        verifier: TokenVerifier,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._verify = verifier.verify
        self._max = max_entries
        self._clock = clock
        # header value → (valid until, the principal, or the reason it was refused)
        self._entries: dict[bytes, tuple[float, Principal | str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, authorization: bytes) -> Principal:
        """The caller an ``Authorization`` header value names; ``TokenRejected`` if none."""
        now = self._clock()
        hit = self._entries.get(authorization)
        if hit is not None and now < hit[0]:
            found = hit[1]
            if type(found) is Principal:
                return found
            raise TokenRejected(str(found))
        try:
            principal = self._verify(bearer_token(authorization))
        except TokenRejected as exc:
            self._store(authorization, now + REFUSED_CACHED_S, exc.reason)
            raise
        self._store(authorization, min(principal.expires_at, now + MAX_CACHED_S), principal)
        return principal

    def _store(self, key: bytes, until: float, found: Principal | str) -> None:
        entries = self._entries
        entries.pop(key, None)
        while len(entries) >= self._max:
            del entries[next(iter(entries))]
        entries[key] = (until, found)

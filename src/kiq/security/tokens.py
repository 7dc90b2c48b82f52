"""Bearer tokens (JWT) checked with PyJWT, and a bounded cache of the answers.

``TokenVerifier.verify`` checks the signature with the configured key and only
the algorithms that key allows (``keys.py``), then ``exp`` (required), ``nbf``,
``aud`` and ``iss``, each time check with a small leeway for clocks that differ.
``TokenCache`` keeps what it found per ``Authorization`` value (a SHA-256 of the
header's bytes as they came, ``Bearer`` and all), so a caller's second request
costs a hash, a dict lookup and a clock read, not even a decode: a lookup stays on
the fast path. Junk costs little and holds less: a header too long to carry a
token is refused before it is hashed, and refusals are kept apart, few and briefly.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import jwt
import orjson

from kiq.security.errors import TokenRejected
from kiq.security.keys import Keys
from kiq.security.scopes import Grants, VerifiedCaller

# A verified token is re-verified after this long even when it expires later, so a key
# removed from a JWKS file stops its tokens within a minute.
MAX_CACHED_S = 60.0
# A refused token is refused from the cache for this long: a client retrying a bad token
# costs a dict lookup, and a token refused as not yet valid is checked again soon.
REFUSED_CACHED_S = 1.0
MAX_TOKEN_CHARS = 8192
# The longest Authorization value that can hold a token we would accept: longer is junk,
# refused before it is hashed, decoded or remembered.
MAX_HEADER_BYTES = MAX_TOKEN_CHARS + len(b"Bearer ")
# Refusals are remembered apart from callers and fewer, so junk never pushes a caller out.
MAX_REFUSED_ENTRIES = 1024
# Expired entries dropped (oldest first) per entry stored: more than the one added, so
# the expired never pile up, and a miss never pays for a full sweep.
SWEEP_STEP = 4
OTHER_AUDIENCE = "token meant for another service (aud); set --jwt-audience"
_sha256 = hashlib.sha256  # the cache key: about 0.4 µs on a typical header, blake2b more


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
        # PyJWT checks aud either way: without an audience it refuses a token that names one
        # (any non-empty aud), with one it requires the claim.
        self._options: Any = {"require": ["exp"], "verify_aud": True}

    def verify(self, token: str) -> VerifiedCaller:
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
        except jwt.InvalidAudienceError as exc:
            raise TokenRejected(OTHER_AUDIENCE if self._audience is None else _reason(exc)) from exc
        except jwt.PyJWTError as exc:
            raise TokenRejected(_reason(exc)) from exc
        if self._audience is None and "aud" in claims:
            raise TokenRejected(OTHER_AUDIENCE)  # an empty one, which PyJWT lets through
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            # Someone to count requests against all the same: this token.
            subject = "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
        return VerifiedCaller(
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


def verified_claims(authorization: bytes) -> dict[str, Any] | None:
    """The claims of the bearer token in ``authorization``, read without a check: only for
    a header whose token the node has verified already (``TokenCache``); None when there
    are none to read."""
    try:
        payload = bearer_token(authorization).split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error, TokenRejected, orjson.JSONDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


class TokenCache:
    """``TokenVerifier.verify`` remembered per Authorization value (by its SHA-256).

    Callers: at most ``max_entries``, oldest out first, each until its token expires
    (at most ``MAX_CACHED_S``). Refusals: ``REFUSED_CACHED_S`` each, in a cache of their
    own of at most ``MAX_REFUSED_ENTRIES``. A header longer than ``MAX_HEADER_BYTES`` is
    refused outright. Every store first drops up to ``SWEEP_STEP`` expired entries.
    """

    def __init__(
        self,
        verifier: TokenVerifier,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._verify = verifier.verify
        self._max = max(1, max_entries)
        self._max_refused = min(self._max, MAX_REFUSED_ENTRIES)
        self._clock = clock
        # hash of the header value → (valid until, what it names); oldest first
        self._callers: OrderedDict[bytes, tuple[float, VerifiedCaller]] = OrderedDict()
        self._refused: OrderedDict[bytes, tuple[float, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._callers) + len(self._refused)

    def cached(self, authorization: bytes) -> VerifiedCaller | None:
        """The caller a header names if already verified, else None: never a signature check
        (what an address refused too often may still use, api/auth.py)."""
        if len(authorization) > MAX_HEADER_BYTES:
            return None
        hit = self._callers.get(_sha256(authorization).digest())
        return hit[1] if hit is not None and self._clock() < hit[0] else None

    def principal(self, authorization: bytes) -> VerifiedCaller:
        """The caller an ``Authorization`` header value names; ``TokenRejected`` if none."""
        if len(authorization) > MAX_HEADER_BYTES:
            raise TokenRejected(f"Authorization header over {MAX_HEADER_BYTES} bytes")
        key = _sha256(authorization).digest()
        now = self._clock()
        hit = self._callers.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        refusal = self._refused.get(key)
        if refusal is not None and now < refusal[0]:
            raise TokenRejected(refusal[1])
        try:
            principal = self._verify(bearer_token(authorization))
        except TokenRejected as exc:
            self._callers.pop(key, None)
            refused = (now + REFUSED_CACHED_S, exc.reason)
            _store(self._refused, self._max_refused, key, refused, now)
            raise
        self._refused.pop(key, None)
        until = min(principal.expires_at, now + MAX_CACHED_S)
        _store(self._callers, self._max, key, (until, principal), now)
        return principal


_V = TypeVar("_V")


def _store(
    entries: OrderedDict[bytes, tuple[float, _V]],
    limit: int,
    key: bytes,
    entry: tuple[float, _V],
    now: float,
) -> None:
    """``entry`` under ``key``, after a few expired entries and any over ``limit`` left.
    Entries expire roughly in the order they came (none lasts over ``MAX_CACHED_S``), so
    the expired are found at the old end."""
    entries.pop(key, None)
    for _ in range(SWEEP_STEP):
        oldest = next(iter(entries.values()), None)
        if oldest is None or oldest[0] > now:
            break
        entries.popitem(last=False)
    while len(entries) >= limit:
        entries.popitem(last=False)
    entries[key] = entry

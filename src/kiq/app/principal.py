"""``kiq.Principal``: the verified caller of a request, as an application's handler sees it.

The node verifies a caller's token once (``kiq.security``: ``TokenCache`` keeps what it
found per Authorization header, by the header's hash) and puts its ``security.VerifiedCaller``
in the request's scope (api/auth.py). That one carries what kiq decides with: the subject,
kiq's own grants, the expiry. A handler asking for ``Request.principal`` gets this public
view of it, made then and only then, so a request that never asks pays nothing: the
token's claims are read from the request's own Authorization header, the very bytes the
cache matched (a token is only ever in the scope once verified), so they are the verified
token's claims.

A caller a peer vouches for (a request forwarded from another node carries the caller's
statement, never the token) has its subject, kiq's scopes and expiry, and no claims.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kiq.security import VerifiedCaller
from kiq.security.tokens import verified_claims

_NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: the verified caller of a node with authentication."""

    subject: str  # the token's ``sub`` ("token:<hash>" when it has none)
    scopes: frozenset[str]  # every word of the token's ``scope`` claim, kiq's and others
    claims: Mapping[str, Any]  # the token's claims, read-only; empty when a peer vouched
    expires_at: float  # epoch seconds (the token's ``exp``, the node's leeway included)

    @classmethod
    def of(cls, verified: VerifiedCaller, authorization: str | None) -> Principal:
        """The caller ``verified`` names; ``authorization``: the header its token came in
        (None: a peer's statement)."""
        claims = _claims(authorization) if authorization is not None else _NO_CLAIMS
        words = _words(claims.get("scope")) if claims else None
        if words is None:  # no claims to read them from: kiq's own, as verified
            words = frozenset(verified.grants.words().split())
        return cls(verified.subject, words, claims, verified.expires_at)


def _claims(authorization: str) -> Mapping[str, Any]:
    """The payload of the (verified) bearer token in ``authorization``, frozen; empty when
    there is none to read."""
    claims = verified_claims(authorization.encode("latin-1"))
    frozen = _frozen(claims) if claims is not None else None
    return frozen if isinstance(frozen, Mapping) else _NO_CLAIMS


def _frozen(value: Any) -> Any:
    """``value`` made read-only all the way down: objects as mappings, arrays as tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _words(claim: object) -> frozenset[str] | None:
    """The ``scope`` claim's words (a space-separated string, or a list of strings)."""
    if isinstance(claim, str):
        return frozenset(claim.split())
    if isinstance(claim, list | tuple):
        return frozenset(w for w in claim if isinstance(w, str))
    return frozenset() if claim is None else None

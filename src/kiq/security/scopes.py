"""What a token's ``scope`` claim grants (space-separated, as OAuth 2.0 writes it).

    kiq:read          every table
    kiq:read:TABLE    one table (the table's name as served, not its topic)
    kiq:write         POST /v1/words and every other write an application makes
    kiq:admin         /v1/metadata and /metrics

Unknown scopes are ignored, so one token can serve several services.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass, field

import orjson

from kiq.security.errors import TokenRejected

READ = "kiq:read"
WRITE = "kiq:write"
ADMIN = "kiq:admin"
_READ_ONE = READ + ":"


def read_scope(table: str) -> str:
    """The narrowest scope that reads ``table``: what a 403 names."""
    return _READ_ONE + table


@dataclass(frozen=True, slots=True)
class Grants:
    """The rights one token carries."""

    read_all: bool = False
    read: frozenset[str] = frozenset()
    write: bool = False
    admin: bool = False

    @classmethod
    def parse(cls, claim: object) -> Grants:
        """From the ``scope`` claim: a space-separated string (a list of strings also does)."""
        if isinstance(claim, str):
            words = claim.split()
        elif isinstance(claim, list):
            words = [w for w in claim if isinstance(w, str)]
        else:
            words = []
        tables = frozenset(w[len(_READ_ONE) :] for w in words if w.startswith(_READ_ONE))
        return cls(READ in words, tables - {""}, WRITE in words, ADMIN in words)

    def may_read(self, table: str) -> bool:
        return self.read_all or table in self.read

    def words(self) -> str:
        """The ``scope`` claim these grants parse from (``parse(words())`` is the same)."""
        words = [READ] if self.read_all else []
        words += sorted(_READ_ONE + table for table in self.read)
        words += [WRITE] if self.write else []
        words += [ADMIN] if self.admin else []
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class VerifiedCaller:
    """A verified caller: who (``sub``, for logs and rate limits), what, and until when."""

    subject: str
    grants: Grants
    expires_at: float  # epoch seconds, leeway included: the cache's bound
    # What a node forwarding this caller's request tells the peer, in place of the token
    # (``statement``): made once per verified token, as the cache keeps the principal.
    statement: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        claims = [self.subject, self.grants.words(), self.expires_at]
        encoded = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=")
        object.__setattr__(self, "statement", encoded.decode())

    @classmethod
    def from_statement(cls, statement: str, now: float | None = None) -> VerifiedCaller:
        """The caller a peer's statement names. Only believe one whose request carried a valid
        cluster credential: the credential's MAC covers the statement."""
        try:
            raw = base64.urlsafe_b64decode(statement + "=" * (-len(statement) % 4))
            subject, words, expires_at = orjson.loads(raw)
        except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
            raise TokenRejected("malformed caller statement from a peer") from None
        if not isinstance(subject, str) or not isinstance(words, str):
            raise TokenRejected("malformed caller statement from a peer")
        if not isinstance(expires_at, int | float) or expires_at < (now or time.time()):
            raise TokenRejected("token expired")
        return cls(subject, Grants.parse(words), float(expires_at))

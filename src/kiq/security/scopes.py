"""What a token's ``scope`` claim grants (space-separated, as OAuth 2.0 writes it).

    kiq:read          every table
    kiq:read:TABLE    one table (the table's name as served, not its topic)
    kiq:write         POST /v1/words and every other write an application makes
    kiq:admin         /v1/metadata and /metrics

Unknown scopes are ignored, so one token can serve several services.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified caller: who (``sub``, for logs and rate limits), what, and until when."""

    subject: str
    grants: Grants
    expires_at: float  # epoch seconds, leeway included: the cache's bound

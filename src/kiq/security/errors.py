"""Why a credential was refused. The API turns these into 401/403 answers."""

from __future__ import annotations

from kiq.errors import KiqError


class TokenRejected(KiqError):
    """A bearer token that is malformed, badly signed, expired, not yet valid or not ours.

    ``reason`` is safe to show the caller: it never quotes the token.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CredentialRejected(KiqError):
    """A node-to-node request without a valid cluster credential."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

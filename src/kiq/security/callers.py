"""A caller's address as a front door saw it, sealed so a node may count it as the caller's.

``kiq proxy`` relays many callers from one address; a node's per-address limits (refused
credentials, ``[limits] auth_failure_rate``; the rate limit of a caller without a token)
would then count them all as one. With the cluster's secret (``--cluster-secret-file``)
the proxy sends each request ``X-Kiq-Caller: ADDRESS TIME.NONCE.MAC``: MAC the
HMAC-SHA256, under a key derived from the cluster secret for this use alone, of the
method, the request target (path and query, as sent), ADDRESS, TIME (epoch ms) and NONCE.
A node with the same secret takes ADDRESS as the request's client when the MAC matches,
TIME is within ``WINDOW_S`` of its clock and it has not seen the MAC before; otherwise it
ignores the header and counts the connection's own address, as without a proxy. Nobody
without the secret can claim an address, and a seal seen once is not taken again.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from pathlib import Path

from kiq.security.errors import CredentialRejected
from kiq.security.keys import read_secret
from kiq.security.stamps import Stamps

HEADER = "x-kiq-caller"
WINDOW_S = 5.0
MAX_ADDRESS_CHARS = 64  # an IPv6 address with a zone, at most; anything longer is junk
_KEY_DOMAIN = b"kiq-caller-key-v1"
_DOMAIN = b"kiq-caller-v1\n"
_ADDRESS = frozenset("0123456789abcdefABCDEF:.%[]-_")


class CallerSeal:
    """Seals a caller's address (a proxy) and opens a sealed one (a node)."""

    def __init__(
        self,
        secret: bytes,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,
        max_seen: int = 200_000,
    ) -> None:
        # Its own key: a sealed address is never a cluster credential, nor the reverse.
        self._key = hmac.new(secret, _KEY_DOMAIN, hashlib.sha256).digest()
        self._stamps = Stamps("caller seal", window_s, clock, max_seen)

    @classmethod
    def from_file(cls, path: Path) -> CallerSeal:
        return cls(read_secret(path, "--cluster-secret-file"))

    def __repr__(self) -> str:
        return "CallerSeal(***)"

    def seal(self, method: str, target: str, address: str) -> str:
        """The header's value for a request ``method target`` made for the caller at
        ``address``."""
        stamp, nonce = self._stamps.new()
        mac = self._mac(method, target, address, stamp, nonce)
        return f"{address} {stamp}.{nonce}.{mac.hex()}"

    def open(self, method: str, target: str, value: str) -> str:
        """The address ``value`` carries, once its seal proves it is fresh, unseen and made
        for this request; ``CredentialRejected`` otherwise."""
        address, _, credential = value.partition(" ")
        if not 0 < len(address) <= MAX_ADDRESS_CHARS or not _ADDRESS.issuperset(address):
            raise CredentialRejected("malformed caller address")
        got = self._stamps.parse(credential)
        expected = self._mac(method, target, address, got.stamp, got.nonce)
        if not hmac.compare_digest(got.mac, expected):
            raise CredentialRejected("caller seal does not match the request")
        self._stamps.take(got)
        return address

    def _mac(self, method: str, target: str, address: str, stamp: str, nonce: str) -> bytes:
        fields = f"{method}\n{target}\n{address}\n{stamp}\n{nonce}\n"
        return hmac.new(self._key, _DOMAIN + fields.encode("latin-1"), hashlib.sha256).digest()

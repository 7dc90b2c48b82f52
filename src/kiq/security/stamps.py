"""``TIME.NONCE.MAC``: the fresh, single-use stamp both of kiq's signed headers carry.

The cluster credential (``cluster.py``) and a proxy's sealed caller address (``callers.py``)
sign different fields under different keys, but are stamped, checked and remembered alike:
TIME in epoch milliseconds, NONCE 16 random hex digits, MAC 64 hex digits. Each part's size
is checked before any arithmetic, so no junk header costs more than a length check; a MAC is
taken once within the window (either way: clocks differ a little), and the memory of those
taken is bounded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from kiq.security.errors import CredentialRejected

# 13 digits until the year 2286.
_MAX_STAMP_DIGITS = 15
_NONCE_CHARS = 16
_MAC_CHARS = 64
_HEX = frozenset("0123456789abcdef")
_DIGITS = frozenset("0123456789")


class Stamp(NamedTuple):
    stamp: str
    nonce: str
    mac: bytes
    sent_ms: int
    now_ms: int


class Stamps:
    """Makes stamps, and takes each well-formed, fresh one once; ``what`` names the header
    in refusals (``cluster credential``, ``caller seal``)."""

    def __init__(
        self, what: str, window_s: float, clock: Callable[[], float], max_seen: int
    ) -> None:
        self._what = what
        self._window_ms = int(window_s * 1000)
        self._clock = clock
        self._max_seen = max_seen
        self._seen: dict[bytes, int] = {}  # MAC → its TIME, oldest first

    def __len__(self) -> int:
        """How many taken stamps it remembers."""
        return len(self._seen)

    def new(self) -> tuple[str, str]:
        """TIME and NONCE for a header made now."""
        return str(int(self._clock() * 1000)), os.urandom(8).hex()

    def parse(self, credential: str) -> Stamp:
        """``credential``'s parts once its form and time are right; ``CredentialRejected``
        otherwise."""
        parts = credential.split(".")
        if (
            len(parts) != 3
            or not 0 < len(parts[0]) <= _MAX_STAMP_DIGITS
            or not _DIGITS.issuperset(parts[0])
            or len(parts[1]) != _NONCE_CHARS
            or not _HEX.issuperset(parts[1])
            or len(parts[2]) != _MAC_CHARS
            or not _HEX.issuperset(parts[2])
        ):
            raise CredentialRejected(f"malformed {self._what}")
        stamp, nonce, mac_hex = parts
        now_ms = int(self._clock() * 1000)
        sent_ms = int(stamp)
        if abs(now_ms - sent_ms) > self._window_ms:
            raise CredentialRejected(f"{self._what} outside its time window")
        return Stamp(stamp, nonce, bytes.fromhex(mac_hex), sent_ms, now_ms)

    def take(self, stamp: Stamp) -> None:
        """Remembers a verified stamp's MAC; ``CredentialRejected`` if it was taken before."""
        self._forget(stamp.now_ms)
        if stamp.mac in self._seen:
            raise CredentialRejected(f"{self._what} already used")
        self._seen[stamp.mac] = stamp.sent_ms

    def _forget(self, now_ms: int) -> None:
        """Drops what is too old to be accepted again anyway; bounded at ``max_seen``."""
        seen = self._seen
        oldest = now_ms - self._window_ms
        while seen:
            first = next(iter(seen))
            if seen[first] >= oldest and len(seen) < self._max_seen:
                break
            del seen[first]

"""A client's position: the most it has seen of each partition, sent with every read.

Every answer of a node names what it read (``X-Kiq-Position``: (table, partition) →
offset applied); the client merges each into one position and sends the merged
token with every read (``X-Kiq-After``), so no node answers it from a replica behind
what it has already seen: its reads never go back in time, across nodes, standbys and
failovers, and it reads its own writes made through an application route.
``kiq.positions`` is the token's form.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from kiq.positions import AFTER_HEADER, HEADER, BadPosition, Position, decode, encode, merge

_COVERED_MAX = 1024  # tokens remembered as merged (a few per partition read)


class SessionPosition:
    """One client's position; safe to share between threads (merges take a lock)."""

    __slots__ = ("_covered", "_lock", "_position", "_token")

    def __init__(self, token: str = "") -> None:
        self._lock = threading.Lock()
        self._position: Position = decode(token)
        self._token = encode(self._position)
        # Answers' tokens merged already: the position only grows, so each stays covered
        # until it is set anew. Most answers repeat one (a partition's applied offset, one
        # per partition on a quiet table): a set lookup, not a parse and a merge each.
        self._covered: set[str] = set()

    @property
    def token(self) -> str:
        """The merged position as a token ("" before the first answer)."""
        return self._token

    @token.setter
    def token(self, token: str) -> None:
        """Start from ``token`` (``BadPosition`` when malformed); "" forgets all."""
        position = decode(token)
        with self._lock:
            self._position = position
            self._token = encode(position)
            self._covered = set()

    def asking(self, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """``headers`` with ``X-Kiq-After`` set to the position (as they are when empty)."""
        token = self._token
        if not token:
            return headers
        return {**headers, AFTER_HEADER: token} if headers else {AFTER_HEADER: token}

    def seen(self, headers: Mapping[str, str]) -> None:
        """Merges the ``X-Kiq-Position`` of an answer's ``headers`` (lower-case names)."""
        token = headers.get(HEADER)
        if not token or token in self._covered or token == self._token:
            return
        try:
            answered = decode(token)
        except BadPosition:
            return  # not a node's: nothing to keep
        with self._lock:
            merged = merge(self._position, answered)
            if merged != self._position:
                self._position = merged
                self._token = encode(merged)
            if len(self._covered) >= _COVERED_MAX:
                self._covered = set()  # offsets move on: the old ones come back no more
            self._covered.add(token)

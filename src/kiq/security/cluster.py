"""Node-to-node calls authenticated both ways with the cluster's shared secret.

Every node reads the same secret (``--cluster-secret-file``). A request to a peer
carries ``X-Kiq-Cluster: TIME.NONCE.MAC``: TIME in epoch milliseconds, NONCE 16
random hex digits, MAC the HMAC-SHA256 of the method, the path (with its query),
the URL of the node it is meant for, the caller it is made for (the principal
statement of ``scopes.py``, or nothing), TIME, NONCE and the body. The receiver
accepts it when the MAC matches with its own URL, TIME is within ``WINDOW_S`` of
its own clock (either way: nodes' clocks differ a little), and it has not seen that
MAC before within the window: a captured request cannot be changed, sent to another
node, given another caller, replayed later, or replayed at all.

The answer proves its sender too: the receiver appends ``ANSWER_TAG_BYTES`` of
HMAC over the request's credential and the answer's body (``seal``), which the
sender checks (``open``) before it believes a word. So a process that joined the
serving group without the secret gets no caller's token (only signed statements
bound to it) and cannot answer in a member's name.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable
from pathlib import Path

from kiq.security.callers import CallerSeal
from kiq.security.errors import CredentialRejected
from kiq.security.keys import read_secret

HEADER = "x-kiq-cluster"
WINDOW_S = 5.0
ANSWER_TAG_BYTES = 32
_DOMAIN = b"kiq-cluster-v2\n"
_ANSWER_DOMAIN = b"kiq-cluster-answer-v2\n"
# TIME.NONCE.MAC: 13 digits until the year 2286; the parts' sizes are checked before any
# arithmetic, so no junk header costs more than a length check.
_MAX_STAMP_DIGITS = 15
_NONCE_CHARS = 16
_MAC_CHARS = 64
_HEX = frozenset("0123456789abcdef")
_DIGITS = frozenset("0123456789")


class ClusterKey:
    """Signs this node's requests to peers and checks theirs; seals and opens answers."""

    def __init__(
        self,
        secret: bytes,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,
        max_seen: int = 200_000,
    ) -> None:
        self._secret = secret
        self._window_ms = int(window_s * 1000)
        self._clock = clock
        self._max_seen = max_seen
        self._seen: dict[bytes, int] = {}  # MAC → its TIME, oldest first (pruned as time passes)

    @classmethod
    def from_file(cls, path: Path) -> ClusterKey:
        return cls(read_secret(path, "--cluster-secret-file"))

    def __repr__(self) -> str:
        return "ClusterKey(***)"

    def callers(self) -> CallerSeal:
        """What opens the callers' addresses a proxy sealed with this secret (``callers.py``)."""
        return CallerSeal(self._secret)

    def sign(
        self, destination: str, method: str, path: str, body: bytes, principal: str | None = None
    ) -> str:
        """The credential of a request to the node at ``destination`` (its advertised URL)."""
        stamp = str(int(self._clock() * 1000))
        nonce = os.urandom(8).hex()
        mac = self._mac(destination, method, path, principal, stamp, nonce, body)
        return f"{stamp}.{nonce}.{mac.hex()}"

    def check_form(self, credential: str | None) -> None:
        """What can be checked before the body is read: present, well formed, in its window."""
        self._parse(credential)

    def verify(
        self,
        destination: str,
        method: str,
        path: str,
        body: bytes,
        credential: str | None,
        principal: str | None = None,
    ) -> None:
        """Returns when ``credential`` is a fresh, unseen signature of this request, made for
        this node (``destination``: its own advertised URL) and this caller."""
        stamp, nonce, mac, sent_ms, now_ms = self._parse(credential)
        expected = self._mac(destination, method, path, principal, stamp, nonce, body)
        if not hmac.compare_digest(mac, expected):
            raise CredentialRejected("cluster credential does not match the request")
        self._forget(now_ms)
        if mac in self._seen:
            raise CredentialRejected("cluster credential already used")
        self._seen[mac] = sent_ms

    def seal(self, credential: str, answer: bytes) -> bytes:
        """``answer`` with its tag appended: the proof that a member answered this request."""
        return answer + self._answer_mac(credential, answer)

    def open(self, credential: str, sealed: bytes) -> bytes:
        """The answer inside ``sealed``, once its tag proves a member answered ``credential``."""
        answer, tag = sealed[:-ANSWER_TAG_BYTES], sealed[-ANSWER_TAG_BYTES:]
        if len(sealed) < ANSWER_TAG_BYTES or not hmac.compare_digest(
            tag, self._answer_mac(credential, answer)
        ):
            raise CredentialRejected("the answer is not signed with the cluster secret")
        return answer

    def _parse(self, credential: str | None) -> tuple[str, str, bytes, int, int]:
        if not credential:
            raise CredentialRejected("no cluster credential: node-to-node paths are for members")
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
            raise CredentialRejected("malformed cluster credential")
        stamp, nonce, mac_hex = parts
        now_ms = int(self._clock() * 1000)
        sent_ms = int(stamp)
        if abs(now_ms - sent_ms) > self._window_ms:
            raise CredentialRejected("cluster credential outside its time window")
        return stamp, nonce, bytes.fromhex(mac_hex), sent_ms, now_ms

    def _mac(
        self,
        destination: str,
        method: str,
        path: str,
        principal: str | None,
        stamp: str,
        nonce: str,
        body: bytes,
    ) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        fields = f"{method}\n{path}\n{destination.rstrip('/')}\n{principal or ''}\n"
        mac.update(_DOMAIN + f"{fields}{stamp}\n{nonce}\n".encode())
        mac.update(body)
        return mac.digest()

    def _answer_mac(self, credential: str, answer: bytes) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        mac.update(_ANSWER_DOMAIN + credential.encode("latin-1") + b"\n")
        mac.update(answer)
        return mac.digest()

    def _forget(self, now_ms: int) -> None:
        """Drops what is too old to be accepted again anyway; bounded at ``max_seen``."""
        seen = self._seen
        oldest = now_ms - self._window_ms
        while seen:
            first = next(iter(seen))
            if seen[first] >= oldest and len(seen) < self._max_seen:
                break
            del seen[first]

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
import time
from collections.abc import Callable
from pathlib import Path

from kiq.security.callers import CallerSeal
from kiq.security.errors import CredentialRejected
from kiq.security.keys import read_secret
from kiq.security.stamps import Stamp, Stamps

HEADER = "x-kiq-cluster"
WINDOW_S = 5.0
ANSWER_TAG_BYTES = 32
_DOMAIN = b"kiq-cluster-v2\n"
_ANSWER_DOMAIN = b"kiq-cluster-answer-v2\n"


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
        self._stamps = Stamps("cluster credential", window_s, clock, max_seen)

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
        stamp, nonce = self._stamps.new()
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
        got = self._parse(credential)
        expected = self._mac(destination, method, path, principal, got.stamp, got.nonce, body)
        if not hmac.compare_digest(got.mac, expected):
            raise CredentialRejected("cluster credential does not match the request")
        self._stamps.take(got)

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

    def _parse(self, credential: str | None) -> Stamp:
        if not credential:
            raise CredentialRejected("no cluster credential: node-to-node paths are for members")
        return self._stamps.parse(credential)

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

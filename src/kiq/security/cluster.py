"""Node-to-node requests authenticated as cluster members: an HMAC over the request.

Every node reads the same secret (``--cluster-secret-file``). A request to a peer
carries ``X-Kiq-Cluster: TIME.NONCE.MAC``: TIME in epoch milliseconds, NONCE 16
random hex digits, MAC the HMAC-SHA256 of the method, the path (with its query),
TIME, NONCE and the body. The receiver accepts it when the MAC matches, TIME is
within ``WINDOW_S`` of its own clock (either way: nodes' clocks differ a little),
and it has not seen that MAC before within the window: a captured request cannot
be changed, replayed later, or replayed at all.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kiq.security.errors import CredentialRejected
from kiq.security.keys import read_secret

HEADER = "x-kiq-cluster"
WINDOW_S = 5.0
_DOMAIN = b"kiq-cluster-v1\n"


class ClusterKey:
    """Signs this node's requests to peers and checks theirs."""

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

    def headers(self, method: str, path: str, body: bytes) -> Mapping[str, str]:
        """The header a request to a peer carries (``Peers``' ``extra_headers``)."""
        return {HEADER: self.sign(method, path, body)}

    def sign(self, method: str, path: str, body: bytes) -> str:
        stamp = str(int(self._clock() * 1000))
        nonce = os.urandom(8).hex()
        return f"{stamp}.{nonce}.{self._mac(method, path, stamp, nonce, body).hex()}"

    def verify(self, method: str, path: str, body: bytes, credential: str | None) -> None:
        """Returns when ``credential`` is a fresh, unseen signature of this request."""
        if not credential:
            raise CredentialRejected("no cluster credential: node-to-node paths are for members")
        parts = credential.split(".")
        if len(parts) != 3 or not parts[0].isdigit():
            raise CredentialRejected("malformed cluster credential")
        stamp, nonce, mac_hex = parts
        try:
            mac = bytes.fromhex(mac_hex)
        except ValueError:
            raise CredentialRejected("malformed cluster credential") from None
        now_ms = int(self._clock() * 1000)
        sent_ms = int(stamp)
        if abs(now_ms - sent_ms) > self._window_ms:
            raise CredentialRejected("cluster credential outside its time window")
        if not hmac.compare_digest(mac, self._mac(method, path, stamp, nonce, body)):
            raise CredentialRejected("cluster credential does not match the request")
        self._forget(now_ms)
        if mac in self._seen:
            raise CredentialRejected("cluster credential already used")
        self._seen[mac] = sent_ms

    def _mac(self, method: str, path: str, stamp: str, nonce: str, body: bytes) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        mac.update(_DOMAIN + f"{method}\n{path}\n{stamp}\n{nonce}\n".encode())
        mac.update(body)
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

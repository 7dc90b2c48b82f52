"""The caller's address a front door (``kiq proxy``) sealed for this node: the request's own.

A node with a cluster secret opens ``X-Kiq-Caller`` (``kiq.security.callers``) before
anything counts by address (refused credentials, the rate limit, logs): a good seal makes
the sealed address the request's client, so a proxy's callers each have their own
budgets; a bad or replayed one is ignored (the connection's own address counts, as
without a proxy) and said in the log at most once a minute. The header is taken out of
the request either way, so it reaches no handler and no read worker's node.
"""

from __future__ import annotations

import logging
import time

from kiq.api.asgi import Scope
from kiq.security.callers import HEADER, CallerSeal
from kiq.security.errors import CredentialRejected

log = logging.getLogger(__name__)

_HEADER = HEADER.encode()
LOG_EVERY_S = 60.0


class RelayedCallers:
    """``take(scope)`` on every HTTP request, before the routes."""

    def __init__(self, seal: CallerSeal) -> None:
        self._seal = seal
        self._logged_at = float("-inf")
        self.refused = 0  # seals ignored since start

    def take(self, scope: Scope) -> None:
        headers = scope["headers"]
        value: bytes | None = None
        for name, given in headers:
            if name == _HEADER:
                value = given
                break
        if value is None:
            return
        scope["headers"] = [h for h in headers if h[0] != _HEADER]
        target: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string") or b""
        if query:
            target += b"?" + query
        try:
            address = self._seal.open(
                scope["method"], target.decode("latin-1"), value.decode("latin-1")
            )
        except CredentialRejected as exc:
            self._refused(scope, exc.reason)
            return
        scope["client"] = (address, 0)

    def _refused(self, scope: Scope, reason: str) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            client = scope.get("client")
            log.warning(
                "caller address refused: %s from=%s refused=%d (is the proxy's "
                "--cluster-secret-file this cluster's?)",
                reason,
                client[0] if client else "",
                self.refused,
            )

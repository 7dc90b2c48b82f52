"""Who may ask a node what: bearer tokens for callers, an HMAC for fellow nodes; TLS.

The threat model (who is trusted, what each fence stops) is docs/security.md.

    scopes.py    the ``scope`` claim → ``Grants``; ``VerifiedCaller`` = subject + grants
    keys.py      the key a token is checked with, and the algorithms it allows
    tokens.py    ``TokenVerifier`` (PyJWT) and ``TokenCache`` (by the header's hash, bounded)
    cluster.py   ``ClusterKey``: node-to-node requests signed for one node, answers sealed
    setup.py     ``security_for``: the above from ``[auth]`` settings, once at startup
    tls.py       HTTPS for the API and between nodes, from ``[tls]``

The HTTP side: which route needs what is declared with each route (``kiq.api.routes``), the
checks and the 401/403 answers are ``kiq.api.auth``.
"""

from kiq.security.cluster import HEADER as CLUSTER_HEADER
from kiq.security.cluster import ClusterKey
from kiq.security.errors import CredentialRejected, TokenRejected
from kiq.security.scopes import ADMIN, READ, WRITE, Grants, VerifiedCaller, read_scope
from kiq.security.setup import Security, auth_mode, is_loopback, operator_token, security_for
from kiq.security.tokens import TokenCache, TokenVerifier

__all__ = [
    "ADMIN",
    "CLUSTER_HEADER",
    "READ",
    "WRITE",
    "ClusterKey",
    "CredentialRejected",
    "Grants",
    "Security",
    "TokenCache",
    "TokenRejected",
    "TokenVerifier",
    "VerifiedCaller",
    "auth_mode",
    "is_loopback",
    "operator_token",
    "read_scope",
    "security_for",
]

"""Authentication for a benchmark's nodes: fresh secrets, and one token that reads and sees all.

``kiq bench lookups --auth jwt`` runs the nodes as ``kiq serve --auth jwt`` with an
HS256 secret and a cluster secret made for the run, and wrk sends the token on
every request: what verification (a cache hit per request) and signing forwarded
batches cost.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import jwt

AUDIENCE = "kiq-bench"


@dataclass(frozen=True)
class BenchAuth:
    env: dict[str, str]  # what every node is started with
    token: str
    jwt_secret: str = field(default="", repr=False)

    @property
    def authorization(self) -> str:
        return f"Bearer {self.token}"

    def authorization_for(self, subject: str, scope: str = "kiq:read") -> str:
        """An ``Authorization`` value of a token for ``subject`` (a tenant of its own)."""
        return f"Bearer {_token(self.jwt_secret, subject, scope)}"


def bench_auth(directory: Path) -> BenchAuth:
    """Secrets written under ``directory`` (readable by this user only), and a token for them."""
    directory.mkdir(parents=True, exist_ok=True)
    jwt_secret = secrets.token_hex(32)
    files = {"jwt.secret": jwt_secret, "cluster.secret": secrets.token_hex(32)}
    for name, value in files.items():
        path = directory / name
        path.write_text(value)
        os.chmod(path, 0o600)
    env = {
        "KIQ_AUTH_MODE": "jwt",
        "KIQ_AUTH_JWT_SECRET_FILE": str(directory / "jwt.secret"),
        "KIQ_AUTH_JWT_AUDIENCE": AUDIENCE,
        "KIQ_AUTH_CLUSTER_SECRET_FILE": str(directory / "cluster.secret"),
    }
    return BenchAuth(env, _token(jwt_secret, "bench", "kiq:read kiq:admin"), jwt_secret)


def _token(jwt_secret: str, subject: str, scope: str) -> str:
    claims = {"sub": subject, "aud": AUDIENCE, "exp": int(time.time()) + 86_400, "scope": scope}
    return jwt.encode(claims, jwt_secret.encode(), algorithm="HS256")

"""The security a node runs with, made once from its ``[auth]`` settings at startup.

Secrets are read from their files here and kept only inside ``SecretKey`` and
``ClusterKey`` (whose reprs hide them); settings hold paths, never values.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass

import jwt

from kiq.errors import ConfigError
from kiq.security.cluster import ClusterKey
from kiq.security.keys import JwksFile, Keys, PublicKey, SecretKey, read_secret
from kiq.security.tokens import TokenCache, TokenVerifier
from kiq.settings import AuthSettings

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Security:
    """``tokens``: the public API wants bearer tokens; ``cluster``: peers sign requests."""

    tokens: TokenCache | None = None
    cluster: ClusterKey | None = None

    @property
    def enabled(self) -> bool:
        return self.tokens is not None or self.cluster is not None


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def auth_mode(auth: AuthSettings, host: str) -> str:
    """``jwt`` or ``none``; unset is ``none`` only on a loopback address."""
    if auth.mode is not None:
        return auth.mode
    if is_loopback(host):
        return "none"
    raise ConfigError(
        f"this node listens on {host}, not a loopback address, and no authentication is set: "
        "give --auth jwt with --jwt-secret-file, --jwt-public-key-file or --jwt-jwks-file and "
        "--cluster-secret-file (see docs/guides/security.md), or --auth none to "
        "serve every table to anyone who can reach it"
    )


def security_for(auth: AuthSettings, host: str) -> Security:
    """What the node checks, its key files read now; a ``ConfigError`` names what to fix."""
    mode = auth_mode(auth, host)
    cluster = ClusterKey.from_file(auth.cluster_secret_file) if auth.cluster_secret_file else None
    if mode == "none":
        if cluster is None and not is_loopback(host):
            raise ConfigError(
                f"--auth none on {host}, not a loopback address, needs --cluster-secret-file (the "
                "same file on every node): without it anyone who reaches this node could call "
                "its node-to-node paths and join as a peer"
            )
        return Security(None, cluster)
    given = [
        name
        for name, path in (
            ("--jwt-secret-file", auth.jwt_secret_file),
            ("--jwt-public-key-file", auth.jwt_public_key_file),
            ("--jwt-jwks-file", auth.jwt_jwks_file),
        )
        if path is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            "--auth jwt needs exactly one of --jwt-secret-file, --jwt-public-key-file, "
            f"--jwt-jwks-file (given: {', '.join(given) or 'none'})"
        )
    if cluster is None:
        raise ConfigError(
            "--auth jwt needs --cluster-secret-file (the same file on every node): without it "
            "the node-to-node paths would answer anyone"
        )
    keys: Keys
    if auth.jwt_secret_file is not None:
        keys = SecretKey(auth.jwt_secret_file)
    elif auth.jwt_public_key_file is not None:
        keys = PublicKey(auth.jwt_public_key_file)
    else:
        assert auth.jwt_jwks_file is not None
        keys = JwksFile(auth.jwt_jwks_file)
    verifier = TokenVerifier(keys, auth.jwt_audience, auth.jwt_issuer, auth.jwt_leeway_s)
    return Security(TokenCache(verifier, auth.token_cache_size), cluster)


def operator_token(auth: AuthSettings, scope: str, ttl_s: float = 3600.0) -> str | None:
    """A token of the nodes' own secret for kiq's own calls (``kiq up`` watching its nodes),
    or None when the nodes check no tokens or only an identity provider can sign them."""
    if auth.mode != "jwt" or auth.jwt_secret_file is None:
        return None
    claims: dict[str, object] = {"sub": "kiq", "exp": int(time.time() + ttl_s), "scope": scope}
    if auth.jwt_audience:
        claims["aud"] = auth.jwt_audience
    if auth.jwt_issuer:
        claims["iss"] = auth.jwt_issuer
    secret = read_secret(auth.jwt_secret_file, "--jwt-secret-file")
    return jwt.encode(claims, secret, algorithm="HS256")

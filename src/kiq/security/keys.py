"""The keys tokens are checked with, and the algorithms each key allows.

The key decides the algorithm, never the token: a secret allows HS256/384/512
only, an RSA key RS* and PS*, an EC key the ES* of its curve, an Ed25519/Ed448
key EdDSA. ``none`` is never allowed, and an HMAC algorithm never meets a public
key (the classic confusion: a public key used as an HMAC secret).

A JWKS file holds several public keys, picked by the token's ``kid``; it is read
again when its modification time changes, so keys rotate without a restart.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from kiq.errors import ConfigError
from kiq.security.errors import TokenRejected

HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
MIN_SECRET_BYTES = 32


class Keys(Protocol):
    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        """The key for a token with this (unverified) header, and the algorithms it allows."""
        ...


def read_secret(path: Path, what: str) -> bytes:
    """A shared secret from its file, surrounding whitespace dropped; at least 32 bytes."""
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"{what} {path} holds {len(secret)} bytes; use at least {MIN_SECRET_BYTES} "
            "(e.g. `openssl rand -hex 32 > FILE`)"
        )
    return secret


def algorithms_for(key: Any) -> frozenset[str]:
    """The signature algorithms a public key can verify."""
    if isinstance(key, rsa.RSAPublicKey):
        return RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey):
        alg = _EC_ALGORITHMS.get(key.curve.name)
        return frozenset({alg}) if alg else frozenset()
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return frozenset({"EdDSA"})
    return frozenset()


class SecretKey:
    """One shared secret (``--jwt-secret-file``): HS256/384/512."""

    def __init__(self, path: Path) -> None:
        self._secret = read_secret(path, "--jwt-secret-file")

    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        return self._secret, HMAC_ALGORITHMS

    def __repr__(self) -> str:
        return "SecretKey(***)"


class PublicKey:
    """One PEM public key (``--jwt-public-key-file``): the algorithms of its type."""

    def __init__(self, path: Path) -> None:
        try:
            key = load_pem_public_key(path.read_bytes())
        except OSError as exc:
            raise ConfigError(
                f"--jwt-public-key-file {path} cannot be read: {exc.strerror}"
            ) from exc
        except ValueError as exc:
            raise ConfigError(f"--jwt-public-key-file {path} is not a PEM public key") from exc
        self._key = key
        self._algorithms = algorithms_for(key)
        if not self._algorithms:
            raise ConfigError(
                f"--jwt-public-key-file {path}: a {type(key).__name__} verifies no JWT "
                "algorithm; use RSA, EC (P-256/384/521) or Ed25519/Ed448"
            )

    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        return self._key, self._algorithms


@dataclass(frozen=True)
class _JwksKey:
    key: Any
    algorithms: frozenset[str]


class JwksFile:
    """Public keys by ``kid`` from a JWKS file, read again whenever its mtime changes.

    Symmetric (``oct``) keys are refused: a JWKS here publishes verification keys.
    A file that becomes unreadable or malformed keeps the last good keys (and says
    so in the rejection reason of tokens whose kid it lacks).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mtime_ns = -1
        self._keys: dict[str, _JwksKey] = {}
        self._reload(strict=True)

    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        self._reload(strict=False)
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise TokenRejected("the token names no key (kid) and the keys are a JWKS")
        found = self._keys.get(kid)
        if found is None:
            raise TokenRejected(f"no key with kid {kid!r} in the JWKS")
        return found.key, found.algorithms

    def _reload(self, strict: bool) -> None:
        try:
            mtime = os.stat(self._path).st_mtime_ns
        except OSError as exc:
            if strict:
                raise ConfigError(f"--jwt-jwks-file {self._path}: {exc.strerror}") from exc
            return
        if mtime == self._mtime_ns:
            return
        try:
            self._keys = _parse_jwks(self._path.read_bytes())
        except (OSError, ValueError) as exc:
            if strict:
                raise ConfigError(f"--jwt-jwks-file {self._path}: {exc}") from exc
            return  # mid-write, say: the last good keys stay, the next change is read
        self._mtime_ns = mtime


def _parse_jwks(raw: bytes) -> dict[str, _JwksKey]:
    data = json.loads(raw)
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError('not a JWKS: expected {"keys": [...]}')
    keys: dict[str, _JwksKey] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            raise ValueError("every key needs a kid")
        if entry.get("kty") == "oct":
            raise ValueError(f"key {entry['kid']}: symmetric keys are not accepted in a JWKS")
        try:
            jwk = PyJWK(entry)
        except PyJWKError as exc:
            raise ValueError(f"key {entry['kid']}: {exc}") from exc
        allowed = algorithms_for(jwk.key)
        if isinstance(entry.get("alg"), str):
            allowed &= {entry["alg"]}
        if not allowed:
            raise ValueError(f"key {entry['kid']}: no JWT algorithm fits it")
        keys[entry["kid"]] = _JwksKey(jwk.key, frozenset(allowed))
    return keys

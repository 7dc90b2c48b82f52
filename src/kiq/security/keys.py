"""The keys tokens are checked with, and the algorithms each key allows.

The key decides the algorithm, never the token: a secret allows HS256/384/512
only, an RSA key RS* and PS*, an EC key the ES* of its curve, an Ed25519/Ed448
key EdDSA. ``none`` is never allowed, and an HMAC algorithm never meets a public
key (the classic confusion: a public key used as an HMAC secret).

A JWKS file holds several public keys, picked by the token's ``kid``; it is read
again when its content changes, so keys rotate without a restart. The content is
what counts, not the mtime alone: ``cp -p``, ``rsync -t`` and ``tar x`` keep it.

Whoever may write a key file decides who gets in, so a file anyone may write is
refused; a secret others may read is named in a warning (Kubernetes mounts secrets
0644 unless told otherwise, so refusing those would break working setups).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable
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
# A JWKS file's content is hashed at most this often when its stat looks unchanged: a copy
# that restores the old mtime on a file system whose ctime is coarse is still seen.
JWKS_HASH_EVERY_S = 5.0

log = logging.getLogger("kiq.security")


class Keys(Protocol):
    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        """The key for a token with this (unverified) header, and the algorithms it allows."""
        ...


def read_key_file(path: Path, what: str, secret: bool) -> bytes:
    """The bytes of a key file, refused when anyone may write it; a ``secret`` that others
    may read or write is named in a warning. The mode is read from the file opened, so
    it is the file whose bytes are returned."""
    try:
        with path.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    if mode & stat.S_IWOTH:
        fix = "600" if secret else "644"
        raise ConfigError(
            f"{what} {path} is writable by every user, so anyone could replace the key: "
            f"run `chmod {fix} {path}`"
        )
    if secret and mode & 0o077:
        log.warning(
            "%s %s may be read by other users (mode %03o): run `chmod 600 %s`",
            what,
            path,
            stat.S_IMODE(mode),
            path,
        )
    return raw


def read_secret(path: Path, what: str) -> bytes:
    """A shared secret from its file, surrounding whitespace dropped; at least 32 bytes."""
    secret = read_key_file(path, what, secret=True).strip()
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
            key = load_pem_public_key(read_key_file(path, "--jwt-public-key-file", secret=False))
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
    """Public keys by ``kid`` from a JWKS file, read again whenever its content changes.

    A change of inode, size, mtime or ctime is seen at the next token verified; the
    content's hash is also compared every ``JWKS_HASH_EVERY_S`` (cheap: this runs on
    cache misses only). Symmetric (``oct``) keys are refused: a JWKS here publishes
    verification keys. A file that becomes unreadable, malformed or writable by anyone
    keeps the last good keys (logged once per content, and said in the rejection reason
    of tokens whose kid it lacks).
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._stat: tuple[int, int, int, int] | None = None
        self._seen: bytes = b""  # the hash of the content last read, good or not
        self._hash_due = 0.0
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
        now = self._clock()
        try:
            st = os.stat(self._path)
        except OSError as exc:
            if strict:
                raise ConfigError(f"--jwt-jwks-file {self._path}: {exc.strerror}") from exc
            return  # mid-rotation, say: the last good keys stay
        seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if seen == self._stat and now < self._hash_due:
            return
        try:
            raw = read_key_file(self._path, "--jwt-jwks-file", secret=False)
        except ConfigError as exc:
            if strict:
                raise
            if seen != self._stat:
                log.warning("%s; the last good keys stay", exc)
            self._stat, self._hash_due = seen, now + JWKS_HASH_EVERY_S
            self._seen = b""  # parsed again once it is fixed, even if unchanged
            return
        self._stat, self._hash_due = seen, now + JWKS_HASH_EVERY_S
        digest = hashlib.sha256(raw).digest()
        if digest == self._seen:
            return
        self._seen = digest
        try:
            self._keys = _parse_jwks(raw)
        except ValueError as exc:
            if strict:
                raise ConfigError(f"--jwt-jwks-file {self._path}: {exc}") from exc
            # mid-write, say: the last good keys stay, the next change is read
            log.warning("--jwt-jwks-file %s: %s; the last good keys stay", self._path, exc)


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

"""Keys and tokens for the security tests, made at run time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

SECRET = b"s" * 64


def secret_file(tmp_path: Path, secret: bytes = SECRET, mode: int = 0o600) -> Path:
    path = tmp_path / "jwt.secret"
    path.write_bytes(secret + b"\n")
    path.chmod(mode)
    return path


def write_jwks(path: Path, keys: list[dict[str, object]], bump: int = 0) -> None:
    """A JWKS file of ``keys``, its mtime ``bump`` seconds from now."""
    path.write_text(json.dumps({"keys": keys}))
    stamp = time.time_ns() + bump * 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    out: dict[str, Any] = {"sub": "alice", "aud": "kiq", "exp": now + 600, "scope": "kiq:read"}
    out.update(overrides)
    return {k: v for k, v in out.items() if v is not None}


def hs256(secret: bytes = SECRET, **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), secret, algorithm="HS256")


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def public_pem(private: Any) -> bytes:
    return bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def unsigned(**overrides: Any) -> str:
    """A token with ``alg: none``: no signature at all."""
    return jwt.encode(claims(**overrides), None, algorithm="none")

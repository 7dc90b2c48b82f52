"""Key files: what they may hold, who may write them, and JWKS rotation by content."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import jwt
import pytest
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from kiq.errors import ConfigError
from kiq.security import ClusterKey, TokenRejected, TokenVerifier
from kiq.security import keys as key_files
from kiq.security.keys import JWKS_HASH_EVERY_S, JwksFile, PublicKey, SecretKey
from tests.unit.security.keys import (
    claims,
    ec_key,
    ed_key,
    public_pem,
    rsa_key,
    secret_file,
    write_jwks,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def refused(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(TokenRejected) as caught:
        verifier.verify(token)
    return caught.value.reason


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kiq.security"]


def test_key_files_that_will_not_do_stop_the_node(tmp_path: Path):
    short = tmp_path / "short"
    short.write_bytes(b"too short\n")
    with pytest.raises(ConfigError, match="use at least 32"):
        SecretKey(short)
    with pytest.raises(ConfigError, match="cannot be read"):
        SecretKey(tmp_path / "absent")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        PublicKey(short)


# -- who may write or read them --------------------------------------------------------


@pytest.mark.parametrize("mode", [0o602, 0o666, 0o777], ids=oct)
def test_a_secret_anyone_may_write_is_refused(tmp_path: Path, mode: int):
    path = secret_file(tmp_path, mode=mode)
    with pytest.raises(ConfigError, match=f"writable by every user.*`chmod 600 {path}`"):
        SecretKey(path)
    with pytest.raises(ConfigError, match="chmod 600"):
        ClusterKey.from_file(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660], ids=oct)
def test_a_secret_others_may_read_is_named_in_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int
):
    """Kubernetes mounts secrets 0644 by default: a warning to grep, not a refusal."""
    path = secret_file(tmp_path, mode=mode)
    with caplog.at_level(logging.WARNING, "kiq.security"):
        SecretKey(path)
    [line] = warnings(caplog)
    assert str(path) in line and f"chmod 600 {path}" in line and f"{mode:03o}" in line


def test_a_secret_only_its_owner_reads_passes_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.DEBUG, "kiq.security"):
        SecretKey(secret_file(tmp_path, mode=0o600))
        SecretKey(secret_file(tmp_path, mode=0o400))
    assert warnings(caplog) == []


def test_public_keys_may_be_read_by_all_but_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    pem = tmp_path / "key.pem"
    pem.write_bytes(public_pem(ec_key()))
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, [{**ECAlgorithm.to_jwk(ec_key().public_key(), as_dict=True), "kid": "a"}])
    with caplog.at_level(logging.DEBUG, "kiq.security"):
        for path in (pem, jwks):
            path.chmod(0o644)
        PublicKey(pem)
        JwksFile(jwks)
    assert warnings(caplog) == []
    for path in (pem, jwks):
        path.chmod(0o646)
    with pytest.raises(ConfigError, match=f"writable by every user.*`chmod 644 {pem}`"):
        PublicKey(pem)
    with pytest.raises(ConfigError, match="writable by every user"):
        JwksFile(jwks)


# -- JWKS ------------------------------------------------------------------------------


def test_jwks_keys_are_chosen_by_kid_and_rotate_with_the_file(tmp_path: Path):
    old, new = rsa_key(), ec_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, [{**RSAAlgorithm.to_jwk(old.public_key(), as_dict=True), "kid": "old"}])
    v = TokenVerifier(JwksFile(path), audience="kiq")
    old_token = jwt.encode(claims(), old, algorithm="RS256", headers={"kid": "old"})
    new_token = jwt.encode(claims(), new, algorithm="ES256", headers={"kid": "new"})
    assert v.verify(old_token).subject == "alice"
    assert refused(v, new_token) == "no key with kid 'new' in the JWKS"
    assert "kid" in refused(v, jwt.encode(claims(), old, algorithm="RS256"))

    write_jwks(path, [{**ECAlgorithm.to_jwk(new.public_key(), as_dict=True), "kid": "new"}], 1)
    assert v.verify(new_token).subject == "alice"
    assert refused(v, old_token) == "no key with kid 'old' in the JWKS"
    # The kid names a key; the key still decides the algorithm.
    forged = jwt.encode(claims(), old, algorithm="RS256", headers={"kid": "new"})
    assert "not accepted" in refused(v, forged)


def test_a_jwks_replaced_with_its_old_mtime_is_read_again(tmp_path: Path):
    """``cp -p``, ``rsync -t``, ``tar x``: same size, same mtime, another key."""
    old, new = ec_key(), ec_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, [{**ECAlgorithm.to_jwk(old.public_key(), as_dict=True), "kid": "k"}])
    before = os.stat(path)
    clock = Clock()
    v = TokenVerifier(JwksFile(path, clock=clock), audience="kiq")
    old_token = jwt.encode(claims(), old, algorithm="ES256", headers={"kid": "k"})
    new_token = jwt.encode(claims(), new, algorithm="ES256", headers={"kid": "k"})
    assert v.verify(old_token).subject == "alice"

    write_jwks(path, [{**ECAlgorithm.to_jwk(new.public_key(), as_dict=True), "kid": "k"}])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    clock.now += JWKS_HASH_EVERY_S  # the content's hash is due, whatever the stat says
    assert v.verify(new_token).subject == "alice"
    assert refused(v, old_token) == "bad signature"


def test_an_unchanged_jwks_is_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "jwks.json"
    key = ed_key()
    write_jwks(path, [{**OKPAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "a"}])
    clock, parsed = Clock(), []
    parse = key_files._parse_jwks
    monkeypatch.setattr(key_files, "_parse_jwks", lambda raw: parsed.append(raw) or parse(raw))
    v = TokenVerifier(JwksFile(path, clock=clock), audience="kiq")
    token = jwt.encode(claims(), key, algorithm="EdDSA", headers={"kid": "a"})
    for _ in range(5):
        clock.now += JWKS_HASH_EVERY_S
        assert v.verify(token).subject == "alice"
    assert len(parsed) == 1


def test_a_broken_jwks_keeps_the_last_good_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    key = ed_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, [{**OKPAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "a"}])
    clock = Clock()
    v = TokenVerifier(JwksFile(path, clock=clock), audience="kiq")
    token = jwt.encode(claims(), key, algorithm="EdDSA", headers={"kid": "a"})
    path.write_text("{not json")
    os.utime(path, ns=(os.stat(path).st_mtime_ns + 2_000_000_000,) * 2)
    with caplog.at_level(logging.WARNING, "kiq.security"):
        for _ in range(3):
            clock.now += JWKS_HASH_EVERY_S
            assert v.verify(token).subject == "alice"
    [line] = warnings(caplog)  # once per content, not per token
    assert str(path) in line and "last good keys stay" in line


def test_a_jwks_made_writable_by_anyone_keeps_the_last_good_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    old, new = ec_key(), ec_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, [{**ECAlgorithm.to_jwk(old.public_key(), as_dict=True), "kid": "old"}])
    clock = Clock()
    v = TokenVerifier(JwksFile(path, clock=clock), audience="kiq")
    old_token = jwt.encode(claims(), old, algorithm="ES256", headers={"kid": "old"})
    new_token = jwt.encode(claims(), new, algorithm="ES256", headers={"kid": "new"})

    write_jwks(path, [{**ECAlgorithm.to_jwk(new.public_key(), as_dict=True), "kid": "new"}], 1)
    path.chmod(0o666)
    with caplog.at_level(logging.WARNING, "kiq.security"):
        assert refused(v, new_token) == "no key with kid 'new' in the JWKS"
        assert v.verify(old_token).subject == "alice"
    assert any("writable by every user" in line for line in warnings(caplog))

    path.chmod(0o644)  # the same content, now trusted
    clock.now += JWKS_HASH_EVERY_S
    assert v.verify(new_token).subject == "alice"


def test_a_jwks_refuses_symmetric_keys(tmp_path: Path):
    path = tmp_path / "jwks.json"
    write_jwks(path, [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}])
    with pytest.raises(ConfigError, match="symmetric"):
        JwksFile(path)

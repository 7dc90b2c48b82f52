"""Bearer tokens: what is accepted, every way one is refused, and the cache in front."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from kiq.errors import ConfigError
from kiq.security import Grants, Principal, TokenCache, TokenRejected, TokenVerifier
from kiq.security.keys import JwksFile, PublicKey, SecretKey
from kiq.security.tokens import MAX_CACHED_S, REFUSED_CACHED_S
from tests.unit.security.keys import (
    SECRET,
    claims,
    ec_key,
    ed_key,
    hs256,
    public_pem,
    rsa_key,
    secret_file,
    unsigned,
)


@pytest.fixture
def verifier(tmp_path: Path) -> TokenVerifier:
    return TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq", leeway_s=5)


def refused(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(TokenRejected) as caught:
        verifier.verify(token)
    return caught.value.reason


def test_a_good_token_names_its_caller_and_grants(verifier: TokenVerifier):
    p = verifier.verify(hs256(scope="kiq:read:kv kiq:write other:thing"))
    assert p.subject == "alice"
    assert p.grants == Grants(read=frozenset({"kv"}), write=True)
    assert p.expires_at > time.time() + 590  # exp plus the leeway


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_every_hmac_algorithm_goes_with_a_secret(verifier: TokenVerifier, alg: str):
    assert verifier.verify(jwt.encode(claims(), SECRET, algorithm=alg)).subject == "alice"


def test_a_token_without_sub_is_still_someone(verifier: TokenVerifier):
    a, b = verifier.verify(hs256(sub=None)), verifier.verify(hs256(sub=None, scope="kiq:admin"))
    assert a.subject.startswith("token:") and a.subject != b.subject


def test_expired_and_not_yet_valid_tokens_are_refused_beyond_the_leeway(
    verifier: TokenVerifier,
):
    now = int(time.time())
    assert refused(verifier, hs256(exp=now - 10)) == "token expired"
    assert verifier.verify(hs256(exp=now - 2)).subject == "alice"  # within 5 s of leeway
    assert refused(verifier, hs256(nbf=now + 60)) == "token not valid yet (nbf)"
    assert verifier.verify(hs256(nbf=now + 2)).subject == "alice"


def test_a_token_must_expire(verifier: TokenVerifier):
    assert "exp" in refused(verifier, hs256(exp=None))


def test_a_wrong_signature_is_refused(verifier: TokenVerifier):
    assert refused(verifier, hs256(secret=b"x" * 64)) == "bad signature"
    header, _, signature = hs256().split(".")
    forged = jwt.encode(claims(scope="kiq:admin"), b"y" * 64, algorithm="HS256").split(".")[1]
    assert refused(verifier, f"{header}.{forged}.{signature}") == "bad signature"


def test_alg_none_is_refused(verifier: TokenVerifier):
    assert "'none' is not accepted" in refused(verifier, unsigned())


def test_malformed_tokens_are_refused(verifier: TokenVerifier):
    for token in ("", "abc", "a.b.c", "x" * 9000):
        refused(verifier, token)


def test_wrong_audience_or_issuer_is_refused(tmp_path: Path):
    v = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq", issuer="https://idp")
    good = hs256(iss="https://idp")
    assert v.verify(good).subject == "alice"
    assert (
        refused(v, hs256(aud="other", iss="https://idp"))
        == "token not meant for this service (aud)"
    )
    assert refused(v, hs256(aud=None, iss="https://idp")) == "token without the 'aud' claim"
    assert refused(v, hs256(iss="https://evil")) == "token from another issuer (iss)"


def test_hmac_signed_with_the_public_key_is_refused(tmp_path: Path):
    """The classic confusion: the public key (known to all) used as an HMAC secret."""
    private = rsa_key()
    pem = tmp_path / "key.pem"
    pem.write_bytes(public_pem(private))
    v = TokenVerifier(PublicKey(pem), audience="kiq")
    assert v.verify(jwt.encode(claims(), private, algorithm="RS256")).subject == "alice"
    assert v.verify(jwt.encode(claims(), private, algorithm="PS384")).subject == "alice"
    # PyJWT refuses to sign HMAC with a PEM, so the forged token is put together by hand.
    header = jwt.utils.base64url_encode(b'{"alg":"HS256","typ":"JWT"}')
    body = jwt.utils.base64url_encode(json.dumps(claims(scope="kiq:admin")).encode())
    signing_input = header + b"." + body
    mac = jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256)
    signature = mac.sign(signing_input, public_pem(private))
    forged = (signing_input + b"." + jwt.utils.base64url_encode(signature)).decode()
    assert "'HS256' is not accepted" in refused(v, forged)
    assert "not accepted" in refused(v, unsigned())


def test_a_secret_does_not_take_public_key_algorithms(verifier: TokenVerifier):
    token = jwt.encode(claims(), rsa_key(), algorithm="RS256")
    assert "'RS256' is not accepted" in refused(verifier, token)


def test_ec_and_eddsa_keys_allow_their_own_algorithm_only(tmp_path: Path):
    ec_private, ed_private = ec_key(), ed_key()
    (tmp_path / "ec.pem").write_bytes(public_pem(ec_private))
    (tmp_path / "ed.pem").write_bytes(public_pem(ed_private))
    ec_v = TokenVerifier(PublicKey(tmp_path / "ec.pem"), audience="kiq")
    ed_v = TokenVerifier(PublicKey(tmp_path / "ed.pem"), audience="kiq")
    assert ec_v.verify(jwt.encode(claims(), ec_private, algorithm="ES256")).subject == "alice"
    assert ed_v.verify(jwt.encode(claims(), ed_private, algorithm="EdDSA")).subject == "alice"
    assert "not accepted" in refused(ec_v, jwt.encode(claims(), ed_private, algorithm="EdDSA"))
    assert "not accepted" in refused(ed_v, jwt.encode(claims(), ec_private, algorithm="ES256"))


def test_key_files_that_will_not_do_stop_the_node(tmp_path: Path):
    short = tmp_path / "short"
    short.write_bytes(b"too short\n")
    with pytest.raises(ConfigError, match="use at least 32"):
        SecretKey(short)
    with pytest.raises(ConfigError, match="cannot be read"):
        SecretKey(tmp_path / "absent")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        PublicKey(short)


def write_jwks(path: Path, keys: list[dict[str, object]], bump: int = 0) -> None:
    path.write_text(json.dumps({"keys": keys}))
    stamp = time.time_ns() + bump * 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


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


def test_a_broken_jwks_keeps_the_last_good_keys(tmp_path: Path):
    key = ed_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, [{**OKPAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "a"}])
    v = TokenVerifier(JwksFile(path), audience="kiq")
    token = jwt.encode(claims(), key, algorithm="EdDSA", headers={"kid": "a"})
    path.write_text("{not json")
    os.utime(path, ns=(time.time_ns() + 2_000_000_000,) * 2)
    assert v.verify(token).subject == "alice"


def test_a_jwks_refuses_symmetric_keys(tmp_path: Path):
    path = tmp_path / "jwks.json"
    write_jwks(path, [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}])
    with pytest.raises(ConfigError, match="symmetric"):
        JwksFile(path)


# -- the cache -------------------------------------------------------------------------


class Counting:
    """A verifier that counts its calls: what the cache saves."""

    def __init__(self, expires_at: float = 1_000.0) -> None:
        self.calls: list[str] = []
        self.expires_at = expires_at

    def verify(self, token: str) -> Principal:
        self.calls.append(token)
        if token.startswith("bad"):
            raise TokenRejected("bad signature")
        return Principal(token, Grants(read_all=True), self.expires_at)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Cache:
    """A ``TokenCache`` asked with bare tokens, as a header ``Bearer TOKEN`` carries them."""

    def __init__(self, verifier: Counting, clock: Clock, size: int) -> None:
        self.inner = TokenCache(verifier, size, clock)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.inner)

    def principal(self, token: str) -> Principal:
        return self.inner.principal(f"Bearer {token}".encode())


def cache(verifier: Counting, clock: Clock, size: int = 100) -> Cache:
    return Cache(verifier, clock, size)


def test_a_cached_token_is_verified_once_until_it_expires():
    verifier, clock = Counting(expires_at=130.0), Clock()
    tokens = cache(verifier, clock)
    first = tokens.principal("a")
    assert tokens.principal("a") is first and verifier.calls == ["a"]
    clock.now = 129.9
    assert tokens.principal("a") is first and verifier.calls == ["a"]
    clock.now = 130.0  # the token's end (leeway included): verified again, and refused there
    tokens.principal("a")
    assert verifier.calls == ["a", "a"]


def test_a_long_lived_token_is_verified_again_after_a_while():
    verifier, clock = Counting(expires_at=10_000.0), Clock()
    tokens = cache(verifier, clock)
    tokens.principal("a")
    clock.now += MAX_CACHED_S + 0.1
    tokens.principal("a")
    assert verifier.calls == ["a", "a"]


def test_the_cache_is_bounded_oldest_out_first():
    verifier, clock = Counting(), Clock()
    tokens = cache(verifier, clock, size=2)
    for token in ("a", "b", "c"):
        tokens.principal(token)
    assert len(tokens) == 2
    tokens.principal("b")
    tokens.principal("c")
    assert verifier.calls == ["a", "b", "c"]
    tokens.principal("a")  # was evicted: verified again
    assert verifier.calls == ["a", "b", "c", "a"] and len(tokens) == 2


def test_a_refused_token_is_refused_from_the_cache_briefly():
    verifier, clock = Counting(), Clock()
    tokens = cache(verifier, clock)
    for _ in range(3):
        with pytest.raises(TokenRejected, match="bad signature"):
            tokens.principal("bad-1")
    assert verifier.calls == ["bad-1"]
    clock.now += REFUSED_CACHED_S
    with pytest.raises(TokenRejected):
        tokens.principal("bad-1")
    assert verifier.calls == ["bad-1", "bad-1"]


def test_the_real_verifier_behind_the_cache(verifier: TokenVerifier):
    tokens = TokenCache(verifier)
    header = f"Bearer {hs256()}".encode()
    assert tokens.principal(header) is tokens.principal(header)
    assert tokens.principal(header.replace(b"Bearer", b"bearer")).subject == "alice"
    with pytest.raises(TokenRejected):
        tokens.principal(f"Bearer {hs256(secret=b'z' * 64)}".encode())
    for malformed in (b"Basic abc", b"Bearer", b"Bearer  ", b"token", hs256().encode()):
        with pytest.raises(TokenRejected, match="not 'Bearer TOKEN'"):
            tokens.principal(malformed)

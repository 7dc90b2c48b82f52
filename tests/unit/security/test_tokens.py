"""Bearer tokens: what is accepted, every way one is refused, and the cache in front."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import jwt
import pytest

from kiq.security import Grants, TokenCache, TokenRejected, TokenVerifier, VerifiedCaller
from kiq.security.keys import PublicKey, SecretKey
from kiq.security.tokens import (
    MAX_CACHED_S,
    MAX_HEADER_BYTES,
    MAX_REFUSED_ENTRIES,
    OTHER_AUDIENCE,
    REFUSED_CACHED_S,
    SWEEP_STEP,
)
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

OTHER = "token meant for another service (aud); set --jwt-audience"


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
    assert v.verify(hs256(aud=["other", "kiq"], iss="https://idp")).subject == "alice"


def test_without_an_audience_a_token_for_another_service_is_refused(tmp_path: Path):
    """No --jwt-audience: a token that names any aud was minted for someone else."""
    v = TokenVerifier(SecretKey(secret_file(tmp_path)))
    assert OTHER_AUDIENCE == OTHER
    assert v.verify(hs256(aud=None)).subject == "alice"
    for aud in ("kiq", "other", ["kiq"], "", []):
        assert refused(v, hs256(aud=aud)) == OTHER, aud


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


# -- the cache -------------------------------------------------------------------------


class Counting:
    """A verifier that counts its calls: what the cache saves."""

    def __init__(self, expires_at: float = 1_000.0) -> None:
        self.calls: list[str] = []
        self.expires_at = expires_at

    def verify(self, token: str) -> VerifiedCaller:
        self.calls.append(token)
        if token.startswith("bad"):
            raise TokenRejected("bad signature")
        return VerifiedCaller(token, Grants(read_all=True), self.expires_at)


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

    def principal(self, token: str) -> VerifiedCaller:
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


# -- junk, and what the cache holds ----------------------------------------------------


def test_a_header_too_long_for_a_token_is_refused_unread():
    verifier, clock = Counting(), Clock()
    tokens = TokenCache(verifier, 100, clock)  # type: ignore[arg-type]
    longest = b"Bearer " + b"x" * (MAX_HEADER_BYTES - len(b"Bearer "))
    tokens.principal(longest)
    assert len(verifier.calls) == 1 and len(tokens) == 1
    with pytest.raises(TokenRejected, match=f"over {MAX_HEADER_BYTES} bytes"):
        tokens.principal(longest + b"x")
    assert len(verifier.calls) == 1 and len(tokens) == 1


@pytest.mark.parametrize("size", [300_000, MAX_HEADER_BYTES])
def test_junk_headers_keep_the_cache_small(verifier: TokenVerifier, size: int):
    """2,000 distinct junk tokens: refused, and what is kept is bounded, not their bytes."""
    tokens = TokenCache(verifier)
    junk = b"A" * (size - 20)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2_000):
            with pytest.raises(TokenRejected):
                tokens.principal(b"Bearer %013d" % i + junk)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(tokens) <= MAX_REFUSED_ENTRIES
    assert held < 1_000_000, f"{held} bytes held"


def test_junk_never_pushes_a_valid_caller_out():
    verifier, clock = Counting(), Clock()
    tokens = cache(verifier, clock, size=100)
    first = tokens.principal("a")
    for i in range(5_000):
        with pytest.raises(TokenRejected):
            tokens.principal(f"bad-{i}")
    assert tokens.principal("a") is first
    assert verifier.calls.count("a") == 1 and len(tokens) <= 101


def test_expired_entries_are_swept_a_few_at_a_time():
    verifier, clock = Counting(expires_at=10_000.0), Clock()
    tokens = cache(verifier, clock, size=10_000)

    def round_of(name: str) -> None:
        for i in range(100):
            tokens.principal(f"{name}-{i}")
        for i in range(50):
            with pytest.raises(TokenRejected):
                tokens.principal(f"bad-{name}-{i}")

    round_of("first")
    assert len(tokens) == 150
    clock.now += MAX_CACHED_S + 1  # every entry of the first round has expired
    tokens.principal("one")
    assert len(tokens) == 150 + 1 - SWEEP_STEP  # a few dropped per store, never all at once
    round_of("second")
    assert len(tokens) == 151  # the first round's are all gone

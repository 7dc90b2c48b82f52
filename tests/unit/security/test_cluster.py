"""The cluster credential: a signed request passes once; any change, delay or replay fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiq.errors import ConfigError
from kiq.security import ClusterKey, CredentialRejected, Grants, VerifiedCaller

SECRET = b"c" * 32
HERE = "http://n2:8080"  # the receiving node's advertised URL
BODY = b"\x91\x94\xa2kv\xa3key\xc0\xc0"


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pair(skew_s: float = 0.0) -> tuple[ClusterKey, ClusterKey, Clock]:
    """A sender whose clock is ``skew_s`` ahead of the receiver's."""
    receiver_clock = Clock()
    sender = ClusterKey(SECRET, clock=lambda: receiver_clock.now + skew_s)
    return sender, ClusterKey(SECRET, clock=receiver_clock), receiver_clock


def rejected(key: ClusterKey, *request: object) -> str:
    with pytest.raises(CredentialRejected) as caught:
        key.verify(HERE, *request)  # type: ignore[arg-type]
    return caught.value.reason


def test_a_signed_request_is_accepted_once():
    sender, receiver, _ = pair()
    credential = sender.sign(HERE, "POST", "/v1/internal/lookups", BODY)
    receiver.verify(HERE, "POST", "/v1/internal/lookups", BODY, credential)
    reason = rejected(receiver, "POST", "/v1/internal/lookups", BODY, credential)
    assert reason == "cluster credential already used"


def test_two_identical_requests_have_different_credentials():
    sender, receiver, _ = pair()
    a = sender.sign(HERE, "POST", "/v1/internal/lookups", BODY)
    b = sender.sign(HERE, "POST", "/v1/internal/lookups", BODY)
    assert a != b
    receiver.verify(HERE, "POST", "/v1/internal/lookups", BODY, a)
    receiver.verify(HERE, "POST", "/v1/internal/lookups", BODY, b)


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("GET", "/v1/internal/lookups", BODY),
        ("POST", "/v1/internal/scan", BODY),
        ("POST", "/v1/internal/lookups?x=1", BODY),
        ("POST", "/v1/internal/lookups", BODY + b"\x00"),
        ("POST", "/v1/internal/lookups", b""),
    ],
)
def test_any_change_to_the_request_breaks_the_credential(method: str, path: str, body: bytes):
    sender, receiver, _ = pair()
    credential = sender.sign(HERE, "POST", "/v1/internal/lookups", BODY)
    assert rejected(receiver, method, path, body, credential) == (
        "cluster credential does not match the request"
    )


def test_a_changed_time_or_nonce_breaks_it_too():
    sender, receiver, _ = pair()
    stamp, nonce, mac = sender.sign(HERE, "POST", "/p", BODY).split(".")
    later = f"{int(stamp) + 1}.{nonce}.{mac}"
    other = f"{stamp}.{'0' * 16}.{mac}"
    for credential in (later, other):
        reason = rejected(receiver, "POST", "/p", BODY, credential)
        assert reason == "cluster credential does not match the request"


def test_another_secret_does_not_sign_for_the_cluster():
    _, receiver, clock = pair()
    stranger = ClusterKey(b"d" * 32, clock=clock)
    credential = stranger.sign(HERE, "POST", "/p", BODY)
    assert rejected(receiver, "POST", "/p", BODY, credential) == (
        "cluster credential does not match the request"
    )


@pytest.mark.parametrize("skew_s", [-4.9, 4.9])
def test_clocks_a_few_seconds_apart_still_agree(skew_s: float):
    sender, receiver, _ = pair(skew_s)
    receiver.verify(HERE, "POST", "/p", BODY, sender.sign(HERE, "POST", "/p", BODY))


@pytest.mark.parametrize("skew_s", [-5.1, 5.1])
def test_a_credential_outside_the_window_is_refused(skew_s: float):
    sender, receiver, _ = pair(skew_s)
    credential = sender.sign(HERE, "POST", "/p", BODY)
    assert rejected(receiver, "POST", "/p", BODY, credential) == (
        "cluster credential outside its time window"
    )


def test_a_captured_request_replayed_later_is_refused():
    sender, receiver, clock = pair()
    credential = sender.sign(HERE, "POST", "/p", BODY)
    clock.now += 6
    assert "window" in rejected(receiver, "POST", "/p", BODY, credential)


def test_missing_or_malformed_credentials_are_refused():
    _, receiver, _ = pair()
    assert "no cluster credential" in rejected(receiver, "POST", "/p", BODY, None)
    for bad in ("", "x", "1.2", "abc.def.00", "1.2.zz", "1.2.3.4"):
        rejected(receiver, "POST", "/p", BODY, bad)


def test_the_seen_credentials_are_forgotten_as_they_age_and_stay_bounded():
    sender, receiver, clock = pair()
    for _ in range(10):
        receiver.verify(HERE, "POST", "/p", BODY, sender.sign(HERE, "POST", "/p", BODY))
    assert len(receiver._stamps) == 10
    clock.now += 6
    receiver.verify(HERE, "POST", "/p", BODY, sender.sign(HERE, "POST", "/p", BODY))
    assert len(receiver._stamps) == 1
    small = ClusterKey(SECRET, clock=clock, max_seen=3)
    for _ in range(10):
        small.verify(HERE, "POST", "/p", BODY, sender.sign(HERE, "POST", "/p", BODY))
    assert len(small._stamps) <= 3


def test_the_secret_comes_from_a_file_and_never_shows(tmp_path: Path):
    path = tmp_path / "cluster.secret"
    path.write_bytes(SECRET + b"\n")
    key = ClusterKey.from_file(path)
    assert SECRET.decode() not in repr(key) and SECRET.decode() not in str(key)
    path.write_bytes(b"short")
    with pytest.raises(ConfigError, match="--cluster-secret-file"):
        ClusterKey.from_file(path)


def test_a_credential_made_for_another_node_is_refused():
    sender, receiver, _ = pair()
    credential = sender.sign("http://n3:8080", "POST", "/p", BODY)
    assert rejected(receiver, "POST", "/p", BODY, credential) == (
        "cluster credential does not match the request"
    )


def test_the_caller_named_is_covered_by_the_credential():
    sender, receiver, _ = pair()
    alice = VerifiedCaller("alice", Grants(read=frozenset({"kv"})), 2e9).statement
    admin = VerifiedCaller("alice", Grants(admin=True, read_all=True), 2e9).statement
    credential = sender.sign(HERE, "POST", "/p", BODY, alice)
    assert rejected(receiver, "POST", "/p", BODY, credential, admin) == (
        "cluster credential does not match the request"
    )
    receiver.verify(HERE, "POST", "/p", BODY, credential, alice)


@pytest.mark.parametrize(
    "junk",
    [
        "\xb2.a.b",
        "\u00b2" * 3 + "." + "0" * 16 + "." + "0" * 64,
        "9" * 5000 + ".a.b",
        "1" * 14 + "." + "0" * 16 + "." + "0" * 64,
        "1.2." + "g" * 64,
    ],
)
def test_junk_credentials_are_refused_without_an_error_of_their_own(junk: str):
    _, receiver, _ = pair()
    assert rejected(receiver, "POST", "/p", BODY, junk) in (
        "malformed cluster credential",
        "cluster credential outside its time window",
    )
    with pytest.raises(CredentialRejected):
        receiver.check_form(junk)


def test_an_answer_is_believed_only_sealed_for_its_request():
    sender, receiver, _ = pair()
    credential = sender.sign(HERE, "POST", "/p", BODY)
    other = sender.sign(HERE, "POST", "/p", BODY)
    sealed = receiver.seal(credential, b"answer")
    assert sender.open(credential, sealed) == b"answer"
    for forged in (
        receiver.seal(other, b"answer"),  # an answer to another request
        sealed[:-1] + bytes([sealed[-1] ^ 1]),
        b"answer" + b"\0" * 32,
        b"short",
        ClusterKey(b"d" * 32).seal(credential, b"answer"),
    ):
        with pytest.raises(CredentialRejected, match="not signed"):
            sender.open(credential, forged)

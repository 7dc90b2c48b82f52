"""A node's security from its [auth] settings, and the refusal to serve a network unprotected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.security import auth_mode, is_loopback, operator_token, security_for
from kiq.settings import AuthSettings
from tests.unit.security.keys import SECRET, secret_file


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str):
    assert is_loopback(host)
    assert auth_mode(AuthSettings(), host) == "none"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", ""])
def test_a_node_on_the_network_without_auth_refuses_to_start(host: str):
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="--auth jwt") as caught:
        security_for(AuthSettings(), host)
    assert "--auth none" in str(caught.value)


def test_auth_none_given_explicitly_is_honoured_anywhere(tmp_path: Path):
    assert auth_mode(AuthSettings(mode="none"), "0.0.0.0") == "none"
    security = security_for(AuthSettings(mode="none"), "127.0.0.1")
    assert security.tokens is None and security.cluster is None and not security.enabled
    cluster = secret_file(tmp_path)
    security = security_for(AuthSettings(mode="none", cluster_secret_file=cluster), "0.0.0.0")
    assert security.tokens is None and security.cluster is not None


def test_auth_none_off_loopback_without_a_cluster_secret_leaves_no_open_internal_path():
    with pytest.raises(ConfigError, match="--cluster-secret-file"):
        security_for(AuthSettings(mode="none"), "0.0.0.0")


def test_jwt_needs_one_key_and_the_cluster_secret(tmp_path: Path):
    secret = secret_file(tmp_path)
    with pytest.raises(ConfigError, match="exactly one of"):
        security_for(AuthSettings(mode="jwt", cluster_secret_file=secret), "0.0.0.0")
    with pytest.raises(ConfigError, match="exactly one of"):
        security_for(
            AuthSettings(
                mode="jwt",
                jwt_secret_file=secret,
                jwt_jwks_file=secret,
                cluster_secret_file=secret,
            ),
            "0.0.0.0",
        )
    with pytest.raises(ConfigError, match="--cluster-secret-file"):
        security_for(AuthSettings(mode="jwt", jwt_secret_file=secret), "0.0.0.0")
    security = security_for(
        AuthSettings(mode="jwt", jwt_secret_file=secret, cluster_secret_file=secret), "0.0.0.0"
    )
    assert security.tokens is not None and security.cluster is not None


def test_settings_come_from_flags_env_and_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    config = tmp_path / "kiq.toml"
    config.write_text('[auth]\nmode = "jwt"\njwt_audience = "toml"\njwt_issuer = "idp"\n')
    monkeypatch.setenv("KIQ_AUTH_JWT_AUDIENCE", "env")
    monkeypatch.setenv("KIQ_AUTH_CLUSTER_SECRET_FILE", "/run/secrets/cluster")
    auth = settings.load(AuthSettings, config, jwt_leeway_s=5)
    assert (auth.mode, auth.jwt_audience, auth.jwt_issuer) == ("jwt", "env", "idp")
    assert auth.cluster_secret_file == Path("/run/secrets/cluster") and auth.jwt_leeway_s == 5
    with pytest.raises(ConfigError, match="flag --auth, env KIQ_AUTH_MODE, TOML \\[auth\\] mode"):
        settings.load(AuthSettings, None, mode="basic")


def test_no_secret_value_in_settings_or_their_repr(tmp_path: Path):
    secret = secret_file(tmp_path)
    auth = AuthSettings(mode="jwt", jwt_secret_file=secret, cluster_secret_file=secret)
    security = security_for(auth, "127.0.0.1")
    for text in (repr(auth), repr(security), str(auth.model_dump())):
        assert SECRET.decode() not in text


def test_kiq_up_signs_itself_a_token_only_with_a_shared_secret(tmp_path: Path):
    secret = secret_file(tmp_path)
    auth = AuthSettings(
        mode="jwt",
        jwt_secret_file=secret,
        jwt_audience="kiq",
        jwt_issuer="idp",
        cluster_secret_file=secret,
    )
    token = operator_token(auth, "kiq:admin")
    assert token is not None
    tokens = security_for(auth, "127.0.0.1").tokens
    assert tokens is not None and tokens.principal(f"Bearer {token}".encode()).grants.admin
    assert operator_token(AuthSettings(mode="none"), "kiq:admin") is None
    pem = tmp_path / "key.pem"
    assert operator_token(AuthSettings(mode="jwt", jwt_public_key_file=pem), "kiq:admin") is None

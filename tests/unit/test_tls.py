"""TLS settings and contexts: the files a node needs, checked before it starts."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.security import tls
from kiq.settings import ServeSettings, TlsSettings
from tests.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_off_by_default_and_plain_http_advertised():
    conf = settings.load(TlsSettings)
    assert not conf.enabled and tls.scheme(conf) == "http"
    assert tls.server_files(conf) is None
    serve = tls.advertised(ServeSettings(port=8123), conf)
    assert serve.advertised_url == "http://127.0.0.1:8123"


def test_flags_env_and_toml(certs: Certs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    toml = tmp_path / "kiq.toml"
    toml.write_text(f'[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\n')
    monkeypatch.setenv("KIQ_TLS_CA", str(certs.ca))
    conf = settings.load(TlsSettings, toml)
    assert (conf.cert, conf.key, conf.ca) == (certs.cert, certs.key, certs.ca)
    assert conf.enabled and tls.scheme(conf) == "https"
    assert tls.server_files(conf) == (certs.cert.resolve(), certs.key.resolve())


def test_advertised_url_becomes_https_and_a_given_one_must_agree(certs: Certs):
    conf = TlsSettings(cert=certs.cert, key=certs.key)
    serve = tls.advertised(ServeSettings(host="127.0.0.1", port=8443), conf)
    assert serve.advertised_url == "https://127.0.0.1:8443"
    given = ServeSettings(advertise="https://node-a.example:443")
    assert tls.advertised(given, conf) is given
    with pytest.raises(ConfigError, match="advertise a https:// URL"):
        tls.advertised(ServeSettings(advertise="http://node-a:80"), conf)
    with pytest.raises(ConfigError, match="advertise a http:// URL"):
        tls.advertised(ServeSettings(advertise="https://node-a:443"), TlsSettings())


def test_a_certificate_without_its_key_and_the_other_way_round(certs: Certs):
    with pytest.raises(ConfigError, match="both a certificate and its key: cert given, key not"):
        settings.load(TlsSettings, cert=certs.cert)
    with pytest.raises(ConfigError, match="key given, cert not"):
        settings.load(TlsSettings, key=certs.key)


def test_missing_and_unreadable_files_name_the_setting(certs: Certs, tmp_path: Path):
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError) as err:
        settings.load(TlsSettings, cert=missing, key=certs.key)
    assert f"TLS certificate {missing} does not exist" in str(err.value)
    assert "--tls-cert" in str(err.value) and "KIQ_TLS_CERT" in str(err.value)
    with pytest.raises(ConfigError, match=r"TLS CA bundle .* does not exist"):
        settings.load(TlsSettings, ca=missing)
    with pytest.raises(ConfigError, match="is not a file"):
        settings.load(TlsSettings, ca=tmp_path)


def test_a_key_that_is_not_the_certificates_is_refused(certs: Certs, tmp_path: Path):
    other = make_certs(tmp_path / "other")
    with pytest.raises(ConfigError, match="do not load together"):
        tls.server_files(TlsSettings(cert=certs.cert, key=other.key))


def test_the_client_context_verifies_against_the_ca(certs: Certs, tmp_path: Path):
    context = tls.client_context(certs.ca)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1
    not_pem = tmp_path / "junk.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="no usable PEM certificate"):
        tls.client_context(not_pem)

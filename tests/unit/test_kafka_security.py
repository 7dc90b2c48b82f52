"""``[kafka]`` security: settings checks and the translations for librdkafka and Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.kafka import consumer_config, producer_config
from kiq.kafka.config import client_config
from kiq.kafka.security import (
    PLAINTEXT,
    KafkaSecurity,
    librdkafka_config,
    spark_options,
)
from kiq.settings import KafkaSettings


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text('s3cr"et\\x\n')
    return path


def test_plaintext_by_default_adds_nothing():
    security = KafkaSecurity.from_settings(settings.load(KafkaSettings))
    assert security.protocol == "PLAINTEXT"
    assert librdkafka_config(security) == {} and spark_options(security) == {}


def test_settings_from_env_and_toml(
    password_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    toml = tmp_path / "kiq.toml"
    toml.write_text('[kafka]\nsecurity_protocol = "sasl_plaintext"\nsasl_username = "kiq"\n')
    monkeypatch.setenv("KIQ_KAFKA_SASL_PASSWORD_FILE", str(password_file))
    monkeypatch.setenv("KIQ_KAFKA_SASL_MECHANISM", "scram-sha-512")
    conf = settings.load(KafkaSettings, toml)
    assert conf.security_protocol == "SASL_PLAINTEXT" and conf.sasl
    assert conf.sasl_mechanism == "SCRAM-SHA-512" and conf.sasl_username == "kiq"


def test_sasl_needs_a_username_and_a_password_file(password_file: Path, tmp_path: Path):
    with pytest.raises(ConfigError, match="needs sasl_username and sasl_password_file"):
        settings.load(KafkaSettings, security_protocol="SASL_SSL", sasl_username="kiq")
    with pytest.raises(ConfigError, match=r"sasl password file .* does not exist"):
        settings.load(
            KafkaSettings,
            security_protocol="SASL_PLAINTEXT",
            sasl_username="kiq",
            sasl_password_file=tmp_path / "missing",
        )
    with pytest.raises(ConfigError, match="security_protocol"):
        settings.load(KafkaSettings, security_protocol="KERBEROS")
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        settings.load(KafkaSettings, sasl_mechanism="GSSAPI")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    conf = settings.load(
        KafkaSettings,
        security_protocol="SASL_PLAINTEXT",
        sasl_username="kiq",
        sasl_password_file=empty,
    )
    with pytest.raises(ConfigError, match="is empty"):
        KafkaSecurity.from_settings(conf)


def test_sasl_ssl_for_librdkafka_and_spark(password_file: Path, tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    conf = settings.load(
        KafkaSettings,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="kiq",
        sasl_password_file=password_file,
        ssl_ca_file=ca,
    )
    security = KafkaSecurity.from_settings(conf)
    assert librdkafka_config(security) == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "kiq",
        "sasl.password": 's3cr"et\\x',
        "ssl.ca.location": str(ca.resolve()),
    }
    assert spark_options(security) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="kiq" password="s3cr\\"et\\\\x";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca.resolve()),
    }


def test_plain_sasl_and_ssl_alone():
    plain = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "u", "p")
    assert librdkafka_config(plain)["security.protocol"] == "sasl_plaintext"
    assert "ssl.ca.location" not in librdkafka_config(plain)
    jaas = spark_options(plain)["kafka.sasl.jaas.config"]
    assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
    tls_only = KafkaSecurity("SSL", ca_file=Path("/ca.pem"))
    assert librdkafka_config(tls_only) == {
        "security.protocol": "ssl",
        "ssl.ca.location": "/ca.pem",
    }
    assert "kafka.sasl.jaas.config" not in spark_options(tls_only)


def test_the_password_stays_out_of_reprs(password_file: Path):
    conf = settings.load(
        KafkaSettings,
        security_protocol="SASL_PLAINTEXT",
        sasl_username="kiq",
        sasl_password_file=password_file,
    )
    security = KafkaSecurity.from_settings(conf)
    assert security.password == 's3cr"et\\x'
    assert "s3cr" not in repr(security) and "s3cr" not in repr(conf)


def test_every_client_config_carries_the_security_it_is_given():
    assert "security.protocol" not in client_config("h:1")  # PLAINTEXT: Kafka's default
    mine = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "u", "p")
    confs = (
        client_config("h:1", security=mine),
        producer_config("h:1", security=mine),
        consumer_config("h:1", "g", security=mine),
    )
    for conf in confs:
        assert conf["security.protocol"] == "sasl_plaintext"
        assert conf["sasl.username"] == "u" and conf["sasl.password"] == "p"
    assert producer_config("h:1", security=mine)["partitioner"] == "murmur2_random"
    # Nothing is left behind in the process: the next client without one is plaintext.
    assert "security.protocol" not in producer_config("h:1")


def test_two_securities_in_one_process_stay_apart():
    """What a process-wide setting prevented: two identities side by side."""
    import kiq.kafka.security as module

    alice = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "a")
    bob = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "bob", "b")
    confs = [consumer_config("h:1", "g", security=s) for s in (alice, bob, PLAINTEXT)]
    assert [c.get("sasl.username") for c in confs] == ["alice", "bob", None]
    assert [c.get("security.protocol") for c in confs] == ["sasl_plaintext", "sasl_ssl", None]
    assert not hasattr(module, "use") and not hasattr(module, "active")


def test_refused_credentials_are_an_error_not_an_outage(caplog: pytest.LogCaptureFixture):
    from confluent_kafka import KafkaError

    from kiq.kafka.logs import KafkaLog

    kafka_log = KafkaLog()
    line = "sasl_plaintext://h:1/bootstrap: SASL authentication error: Authentication failed"
    with caplog.at_level("WARNING", logger="kiq.kafka.client"):
        kafka_log.log(3, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
        kafka_log.error(KafkaError(KafkaError._AUTHENTICATION, "Invalid username or password"))
    assert kafka_log.auth_failures == 2 and not kafka_log.down
    assert kafka_log.last_auth_failure == "Invalid username or password"
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1  # at most one a minute
    assert "refused kiq's credentials" in errors[0].getMessage()
    assert "sasl_password_file" in errors[0].getMessage()

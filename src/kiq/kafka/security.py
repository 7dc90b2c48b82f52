"""Kafka security from ``KafkaSettings``: one translation for librdkafka, one for Spark.

A ``KafkaSecurity`` is a frozen value, made once where a command reads its settings
and handed to every client wrapper that connects (a node's reader, group seat,
admin calls, writers, dead letters, feeds), as quixstreams hands its
``ConnectionConfig`` in: no process-wide state, so two nodes in one process may
use two identities. ``librdkafka_config`` is its part of a client's configuration;
Spark's Kafka source and sink take the same as ``kafka.``-prefixed options
(``spark_options``), passed with every read and write. The password is read from
its file once and kept out of reprs; nothing here logs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kiq.errors import ConfigError
from kiq.settings import KafkaSettings

__all__ = ["PLAINTEXT", "KafkaSecurity", "librdkafka_config", "spark_options"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class KafkaSecurity:
    """The protocol, SASL identity and CA kiq's Kafka clients use (PLAINTEXT by default)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: Path | None = None

    @classmethod
    def from_settings(cls, settings: KafkaSettings) -> KafkaSecurity:
        """Reads the password file now: a bad file stops the command before any client."""
        password = ""
        if settings.sasl and settings.sasl_password_file is not None:
            password = _read_password(settings.sasl_password_file)
        return cls(
            protocol=settings.security_protocol,
            mechanism=settings.sasl_mechanism,
            username=settings.sasl_username,
            password=password,
            ca_file=settings.ssl_ca_file.resolve() if settings.ssl_ca_file else None,
        )

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


# Kafka's own default: what a client not given a security uses (a broker without any).
PLAINTEXT = KafkaSecurity()


def librdkafka_config(security: KafkaSecurity) -> dict[str, str]:
    """librdkafka's properties for ``security``; empty for PLAINTEXT (its default)."""
    if security.protocol == "PLAINTEXT":
        return {}
    conf = {"security.protocol": security.protocol.lower()}
    if security.sasl:
        conf["sasl.mechanism"] = security.mechanism
        conf["sasl.username"] = security.username
        conf["sasl.password"] = security.password
    if security.tls and security.ca_file is not None:
        conf["ssl.ca.location"] = str(security.ca_file)
    return conf


def spark_options(security: KafkaSecurity) -> dict[str, str]:
    """Spark's Kafka source and sink options for ``security``: the Java client's
    properties, ``kafka.``-prefixed; the SASL identity as a JAAS line."""
    if security.protocol == "PLAINTEXT":
        return {}
    options = {"kafka.security.protocol": security.protocol}
    if security.sasl:
        module = _LOGIN_MODULES[security.mechanism]
        options["kafka.sasl.mechanism"] = security.mechanism
        options["kafka.sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quoted(security.username)}" '
            f'password="{_jaas_quoted(security.password)}";'
        )
    if security.tls and security.ca_file is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(security.ca_file)
    return options


def _read_password(path: Path) -> str:
    try:
        password = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"kafka sasl_password_file {path} cannot be read: {exc}") from exc
    if not password:
        raise ConfigError(f"kafka sasl_password_file {path} is empty")
    return password


def _jaas_quoted(value: str) -> str:
    """``value`` inside a JAAS double-quoted string (Kafka's parser takes backslash escapes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')

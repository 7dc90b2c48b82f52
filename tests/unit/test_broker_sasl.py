"""`kiq broker start --sasl`: the properties and the user the local broker is given."""

from __future__ import annotations

import stat
from pathlib import Path

from kiq.runtime.broker import LocalBroker
from kiq.settings import BrokerSettings


def properties(broker: LocalBroker) -> dict[str, str]:
    node = broker.nodes[0]
    node.write_config(broker.settings, None, broker.security if broker.settings.sasl else None)
    lines = node.properties.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def test_plaintext_by_default(tmp_path: Path):
    broker = LocalBroker(BrokerSettings(port=9300, data_dir=tmp_path / "d", log_dir=tmp_path / "l"))
    props = properties(broker)
    assert props["listeners"].startswith("PLAINTEXT://127.0.0.1:9300,")
    assert "sasl.enabled.mechanisms" not in props
    assert broker.security.protocol == "PLAINTEXT"
    assert not (tmp_path / "d" / "sasl").exists()


def test_sasl_makes_a_password_once_and_a_plain_listener(tmp_path: Path):
    settings = BrokerSettings(port=9300, data_dir=tmp_path / "d", log_dir=tmp_path / "l", sasl=True)
    broker = LocalBroker(settings)
    props = properties(broker)
    password = broker.password_file.read_text().strip()
    assert broker.password_file == (tmp_path / "d" / "sasl" / "password").resolve()
    assert stat.S_IMODE(broker.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(broker.nodes[0].properties.stat().st_mode) == 0o600
    assert len(password) >= 24
    assert props["listeners"].startswith("SASL_PLAINTEXT://127.0.0.1:9300,CONTROLLER://")
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    login = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert f'user_kiq="{password}"' in login and 'username="kiq"' in login
    security = broker.security
    assert (security.protocol, security.mechanism, security.username) == (
        "SASL_PLAINTEXT",
        "PLAIN",
        "kiq",
    )
    assert security.password == password
    assert LocalBroker(settings).security.password == password  # kept across starts


def test_sasl_with_a_given_user_and_password(tmp_path: Path):
    given = tmp_path / "pw"
    given.write_text("dev-secret\n")
    broker = LocalBroker(
        BrokerSettings(
            data_dir=tmp_path / "d",
            log_dir=tmp_path / "l",
            sasl=True,
            sasl_username="alice",
            sasl_password_file=given,
        )
    )
    login = properties(broker)["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'username="alice" password="dev-secret" user_alice="dev-secret";' in login
    assert not (tmp_path / "d" / "sasl").exists()

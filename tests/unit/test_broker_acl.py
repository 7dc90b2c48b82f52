"""`kiq broker start --sasl --acl`: the authorizer, its super user and the other users."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.runtime.broker import LocalBroker
from kiq.settings import BrokerSettings


def read_properties(path: Path) -> dict[str, str]:
    """As Java's ``Properties.load`` reads the file: a backslash escapes the next character."""
    lines = path.read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line)
    return {key: re.sub(r"\\(.)", r"\1", value) for key, value in pairs}


def properties(broker: LocalBroker) -> dict[str, str]:
    node = broker.nodes[0]
    node.write_config(broker.settings, None, broker.security, broker._user_passwords())
    return read_properties(node.properties)


def acl_broker(tmp_path: Path, *users: str) -> LocalBroker:
    return LocalBroker(
        BrokerSettings(
            port=9300,
            controller_port=9301,
            data_dir=tmp_path / "d",
            log_dir=tmp_path / "l",
            sasl=True,
            acl=True,
            sasl_users=list(users),
        )
    )


def test_the_authorizer_with_one_super_user_and_nobody_else_by_default(tmp_path: Path):
    broker = acl_broker(tmp_path, "app")
    props = properties(broker)
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["super.users"] == "User:kiq"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    # The controller port takes SASL too: nobody is a super user by being anonymous there.
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
    assert props["listener.name.controller.sasl.enabled.mechanisms"] == "PLAIN"
    admin = broker.security.password
    controller = props["listener.name.controller.plain.sasl.jaas.config"]
    assert f'username="kiq" password="{admin}" user_kiq="{admin}";' in controller
    assert "user_app" not in controller  # only the brokers speak to the controllers


def test_each_user_gets_a_password_file_of_its_own(tmp_path: Path):
    given = tmp_path / "reader.pw"
    given.write_text("read-only\n")
    broker = acl_broker(tmp_path, "app", f"reader={given}")
    login = properties(broker)["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    app = broker.security_of("app")
    assert broker.users == {
        "app": (tmp_path / "d" / "sasl" / "app.password").resolve(),
        "reader": given.resolve(),
    }
    assert stat.S_IMODE(broker.users["app"].stat().st_mode) == 0o600
    assert len(app.password) >= 24 and app.password != broker.security.password
    assert (app.protocol, app.mechanism, app.username) == ("SASL_PLAINTEXT", "PLAIN", "app")
    assert f'user_app="{app.password}"' in login
    assert 'user_reader="read-only"' in login
    assert f'username="kiq" password="{broker.security.password}"' in login
    assert acl_broker(tmp_path, "app").security_of("app").password == app.password  # kept


def test_a_given_password_file_that_is_missing_is_not_made(tmp_path: Path):
    broker = acl_broker(tmp_path, f"reader={tmp_path / 'nope'}")
    with pytest.raises(Exception, match="cannot be read"):
        broker.security_of("reader")
    assert not (tmp_path / "nope").exists()


def test_passwords_are_quoted_for_jaas(tmp_path: Path):
    given = tmp_path / "pw"
    given.write_text('a"b\\c\n')
    broker = acl_broker(tmp_path, f"odd={given}")
    login = properties(broker)["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'user_odd="a\\"b\\\\c"' in login


def test_the_super_users_client_settings_for_kafkas_tools(tmp_path: Path):
    broker = acl_broker(tmp_path)
    broker._write_admin_properties(broker.security)
    path = broker.admin_properties
    assert path == (tmp_path / "d" / "sasl" / "admin.properties").resolve()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    props = read_properties(path)
    assert props["security.protocol"] == "SASL_PLAINTEXT"
    assert props["sasl.mechanism"] == "PLAIN"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="kiq" password="{broker.security.password}";'
    )


def test_without_acl_nothing_changes(tmp_path: Path):
    broker = LocalBroker(BrokerSettings(data_dir=tmp_path / "d", log_dir=tmp_path / "l", sasl=True))
    props = properties(broker)
    assert "authorizer.class.name" not in props
    assert props["listener.security.protocol.map"].startswith("CONTROLLER:PLAINTEXT,")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"acl": True}, "acl and sasl_users need sasl"),
        ({"sasl": True, "sasl_users": ["a b"]}, "is not NAME or NAME=PASSWORD_FILE"),
        ({"sasl": True, "sasl_users": ["app="]}, "is not NAME or NAME=PASSWORD_FILE"),
        ({"sasl": True, "sasl_users": ["app", "app=f"]}, "named twice"),
        ({"sasl": True, "sasl_users": ["kiq"]}, "names sasl_username 'kiq' again"),
    ],
)
def test_bad_user_settings_say_what_to_fix(flags: dict[str, object], says: str):
    with pytest.raises(ConfigError, match=says):
        settings.load(BrokerSettings, **flags)


def test_a_bad_user_names_its_flag():
    with pytest.raises(ConfigError, match="flag --sasl-user, env KIQ_BROKER_SASL_USERS"):
        settings.load(BrokerSettings, sasl=True, sasl_users=["a b"])


def test_users_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KIQ_BROKER_SASL", "true")
    monkeypatch.setenv("KIQ_BROKER_ACL", "true")
    monkeypatch.setenv("KIQ_BROKER_SASL_USERS", '["app", "node=/run/node.pw"]')
    loaded = settings.load(BrokerSettings)
    assert loaded.acl and loaded.sasl_users == ["app", "node=/run/node.pw"]

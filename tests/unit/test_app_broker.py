"""Where `kiq up` keeps its local broker's data: under the application's home, unless
``[broker] data_dir`` / ``log_dir`` say otherwise (file, environment or flag)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from kiq import settings
from kiq.cli.topics import resolve_bootstrap
from kiq.cli.up import Plan
from kiq.errors import BrokerError
from kiq.runtime.broker import LocalBroker, _listener_ports

APP = '[serve]\ntables = ["t=t"]\n[app]\nendpoints = []\nname = "{name}"\n'


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def app_file(path: Path, name: str, extra: str = "") -> Path:
    path.write_text(APP.format(name=name) + extra)
    return path


def test_each_app_keeps_its_broker_under_its_own_home(tmp_path: Path):
    shop = Plan.load(app_file(tmp_path / "shop.toml", "shop"), None).broker
    views = Plan.load(app_file(tmp_path / "views.toml", "views"), None).broker
    assert (shop.data_dir, shop.log_dir) == (
        Path(".kiq/shop/broker/data"),
        Path(".kiq/shop/broker/logs"),
    )
    assert views.data_dir == Path(".kiq/views/broker/data")
    assert LocalBroker(shop).data_dir == tmp_path / ".kiq/shop/broker/data"


def test_a_home_in_the_file_is_beside_the_file(tmp_path: Path):
    (tmp_path / "app").mkdir()
    extra = 'home = "state"\n'
    broker = Plan.load(app_file(tmp_path / "app" / "kiq.toml", "shop", extra), None).broker
    assert broker.data_dir == tmp_path / "app" / "state" / "broker" / "data"
    assert broker.log_dir == tmp_path / "app" / "state" / "broker" / "logs"
    flagged = Plan.load(tmp_path / "app" / "kiq.toml", None, home=Path("h")).broker
    assert flagged.data_dir == Path("h/broker/data")


def test_data_and_log_dirs_given_anywhere_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    shared = '[broker]\ndata_dir = "shared/data"\n'
    broker = Plan.load(app_file(tmp_path / "a.toml", "a", shared), None).broker
    assert broker.data_dir == tmp_path / "shared" / "data"
    assert broker.log_dir == Path(".kiq/a/broker/logs")  # only what was given is kept

    monkeypatch.setenv("KIQ_BROKER_LOG_DIR", "/var/log/kafka")
    broker = Plan.load(app_file(tmp_path / "b.toml", "b"), None).broker
    assert (broker.data_dir, broker.log_dir) == (
        Path(".kiq/b/broker/data"),
        Path("/var/log/kafka"),
    )
    given = settings.load(settings.BrokerSettings, None, data_dir=Path("d"))
    assert settings.AppSettings(name="c").own_broker(given).data_dir == Path("d")


def test_kiq_broker_on_its_own_keeps_its_defaults(tmp_path: Path):
    app_file(tmp_path / "kiq.toml", "shop")  # an application file in the directory
    broker = settings.load(settings.BrokerSettings, None)
    assert (broker.data_dir, broker.log_dir) == (
        Path(".kiq/broker/data"),
        Path(".kiq/broker/logs"),
    )


def test_topic_commands_find_the_broker_kiq_up_runs(tmp_path: Path):
    config = app_file(tmp_path / "kiq.toml", "shop", "[broker]\nport = 9111\n")
    assert resolve_bootstrap(config, None) == "127.0.0.1:9111"
    assert resolve_bootstrap(config, "elsewhere:9092") == "elsewhere:9092"
    config.write_text(config.read_text().replace("name =", 'bootstrap = "k:1"\nname ='))
    assert resolve_bootstrap(config, None) == "k:1"


def test_a_port_held_by_something_else_is_a_plain_error(tmp_path: Path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        broker = LocalBroker(
            settings.BrokerSettings(port=port, data_dir=tmp_path / "d", log_dir=tmp_path / "l")
        )
        with pytest.raises(BrokerError, match=rf"127\.0\.0\.1:{port} is taken \(") as err:
            broker.start()
    assert "[broker] port (KIQ_BROKER_PORT" in str(err.value)


def test_listener_ports_are_read_from_a_brokers_properties(tmp_path: Path):
    props = tmp_path / "server.properties"
    props.write_text(
        "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        "advertised.listeners=PLAINTEXT://127.0.0.1:9000\n"
    )
    assert _listener_ports(props) == {9092, 9093}
    assert _listener_ports(tmp_path / "missing") == set()

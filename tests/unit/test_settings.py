from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiq import settings
from kiq.errors import ConfigError
from kiq.settings import BrokerSettings, PipelineSettings, SparkSettings, find_jar_cache


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_work_on_a_laptop():
    b = settings.load(BrokerSettings)
    assert b.bootstrap == "127.0.0.1:9092"
    assert b.effective_controller_port == 9093
    assert settings.load(SparkSettings).master == "local[*]"


def test_precedence_flag_env_toml_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    cfg = write(tmp_path / "c.toml", '[broker]\nport = 9500\nheap = "256m"\nhost = "127.0.0.2"\n')
    monkeypatch.setenv("KIQ_BROKER_HEAP", "300m")
    monkeypatch.setenv("KIQ_BROKER_PORT", "9600")
    b = settings.load(BrokerSettings, cfg, port=9700, host=None)
    assert b.port == 9700  # flag beats env and TOML
    assert b.heap == "300m"  # env beats TOML
    assert b.host == "127.0.0.2"  # TOML beats default
    assert b.log_dir == Path(".kiq/broker/logs")  # default


def test_kiq_toml_in_cwd_and_env_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    write(tmp_path / "kiq.toml", '[spark]\nmaster = "spark://a:7077"\n')
    assert settings.load(SparkSettings).master == "spark://a:7077"
    other = write(tmp_path / "other.toml", '[spark]\nmaster = "local[1]"\n')
    monkeypatch.setenv("KIQ_CONFIG", str(other))
    assert settings.load(SparkSettings).master == "local[1]"


def test_bad_values_name_every_way_to_fix_them(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        settings.load(BrokerSettings, port=70000)
    text = str(err.value)
    assert "--port" in text and "KIQ_BROKER_PORT" in text and "[broker] port" in text


def test_unknown_toml_keys_are_errors(tmp_path: Path):
    cfg = write(tmp_path / "c.toml", "[broker]\nprot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        settings.load(BrokerSettings, cfg)


def test_missing_or_broken_config_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        settings.load(BrokerSettings, tmp_path / "nope.toml")
    broken = write(tmp_path / "b.toml", "[broker\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        settings.load(BrokerSettings, broken)
    not_table = write(tmp_path / "n.toml", "broker = 3\n")
    with pytest.raises(ConfigError, match="must be a table"):
        settings.load(BrokerSettings, not_table)


def test_settings_are_frozen():
    b = settings.load(BrokerSettings)
    with pytest.raises(ValueError):
        b.port = 1  # type: ignore[misc]


def test_the_jar_cache_is_the_checkouts_wherever_in_it_kiq_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    checkout = tmp_path / "kiq"
    (checkout / "jvm" / "kafka-broker").mkdir(parents=True)
    (checkout / "jvm" / "kafka-broker" / "pom.xml").touch()
    deep = checkout / "src" / "deep"
    deep.mkdir(parents=True)
    assert find_jar_cache(deep) == checkout / ".cache" / "jars"
    monkeypatch.chdir(deep)
    assert settings.load(BrokerSettings).jars_dir == checkout / ".cache" / "jars"
    assert settings.load(SparkSettings).jars_dir == checkout / ".cache" / "jars"


def test_outside_a_checkout_the_jar_cache_is_the_users_or_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert find_jar_cache() == tmp_path / "xdg" / "kiq" / "jars"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_jar_cache() == tmp_path / "home" / ".cache" / "kiq" / "jars"
    assert settings.load(BrokerSettings).jars_dir == tmp_path / "home" / ".cache" / "kiq" / "jars"
    monkeypatch.setenv("KIQ_SPARK_JARS_DIR", "/opt/kiq/jars")
    assert settings.load(SparkSettings).jars_dir == Path("/opt/kiq/jars")
    cfg = write(tmp_path / "c.toml", '[broker]\njars_dir = "/srv/jars"\n')
    assert settings.load(BrokerSettings, cfg).jars_dir == Path("/srv/jars")


def test_pipeline_settings_from_flags_env_and_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    default = settings.load(PipelineSettings)
    assert (default.bootstrap, default.trigger, default.realtime_batch) == (
        "127.0.0.1:9092",
        "auto",
        "5 minutes",
    )
    cfg = write(tmp_path / "c.toml", '[pipeline]\nbootstrap = "a:9092"\ntrigger = "realtime"\n')
    monkeypatch.setenv("KIQ_PIPELINE_BOOTSTRAP", "b:9092")
    p = settings.load(PipelineSettings, cfg, partitions=6)
    assert (p.bootstrap, p.trigger, p.partitions) == ("b:9092", "realtime", 6)
    with pytest.raises(ConfigError, match="KIQ_PIPELINE_TRIGGER"):
        settings.load(PipelineSettings, trigger="sometimes")


def test_the_application_file_app_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from kiq.settings import AppSettings

    default = settings.load(AppSettings)
    assert default.endpoints == [], "no [app] endpoints: the core API only"
    assert (default.nodes, default.pipelines, default.home_dir) == (3, [], Path(".kiq/kiq"))
    assert default.table_partitions == 30
    cfg = write(
        tmp_path / "app.toml",
        '[app]\nname = "shop"\npipelines = ["shop/pipeline.py:build"]\nendpoints = []\n'
        'topics = { "orders" = 6, "orders-dlq" = 1 }\nfeeds = [["kiq", "feed", "x"]]\n',
    )
    monkeypatch.setenv("KIQ_APP_NODES", "2")
    app = settings.load(AppSettings, cfg, port=9000)
    assert (app.name, app.nodes, app.port, app.endpoints) == ("shop", 2, 9000, [])
    # A file target in the application file is relative to that file's directory.
    assert app.pipelines == [f"{tmp_path}/shop/pipeline.py:build"]
    assert app.feeds == [["kiq", "feed", "x"]]
    assert app.table_partitions == 6, "the first input topic's"
    assert app.home_dir == Path(".kiq/shop")
    monkeypatch.setenv("KIQ_APP_ENDPOINTS", '["a.b:routes"]')
    assert settings.load(AppSettings, cfg).endpoints == ["a.b:routes"]
    with pytest.raises(ConfigError, match="KIQ_APP_NODES"):
        settings.load(AppSettings, cfg, nodes=0)


def test_paths_in_the_application_file_are_relative_to_its_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    from kiq.settings import AppSettings, BrokerSettings, ServeSettings, SparkSettings

    app_dir = tmp_path / "apps" / "shop"
    app_dir.mkdir(parents=True)
    cfg = write(
        app_dir / "kiq.toml",
        '[app]\nhome = "state"\npipelines = ["pipeline.py:build", "kiq.apps.x:build"]\n'
        'endpoints = ["api.py:routes", "/abs/api.py:routes"]\n'
        '[spark]\ncheckpoint_dir = "ckpt"\n[broker]\ndata_dir = "broker/data"\n'
        '[serve]\ntables = ["ev=events,format=avro,schema=ev.avsc", "t=t"]\n',
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # wherever kiq runs
    app = settings.load(AppSettings, cfg)
    assert app.home_dir == app_dir / "state"
    assert app.pipelines == [f"{app_dir}/pipeline.py:build", "kiq.apps.x:build"]
    assert app.endpoints == [f"{app_dir}/api.py:routes", "/abs/api.py:routes"]
    assert settings.load(SparkSettings, cfg).checkpoint_dir == str(app_dir / "ckpt")
    assert settings.load(BrokerSettings, cfg).data_dir == app_dir / "broker" / "data"
    serve = settings.load(ServeSettings, cfg)
    assert serve.tables == [f"ev=events,format=avro,schema={app_dir / 'ev.avsc'}", "t=t"]
    # A URI stays a URI; flags and the environment stay relative to the working directory.
    write(cfg, '[spark]\ncheckpoint_dir = "s3a://bucket/ckpt"\n')
    assert settings.load(SparkSettings, cfg).checkpoint_dir == "s3a://bucket/ckpt"
    monkeypatch.setenv("KIQ_APP_HOME", "here")
    assert settings.load(AppSettings, cfg).home_dir == Path("here")

"""Settings handed to a child kiq command as its environment come back equal, every section."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kiq import settings
from kiq.feeds import FeedSettings
from kiq.settings import (
    AppSettings,
    AuthSettings,
    BrokerSettings,
    KafkaSettings,
    LimitsSettings,
    NodeSettings,
    PipelineSettings,
    ServeSettings,
    SparkClusterSettings,
    SparkSettings,
    TenantLimits,
    TenantQuota,
    TlsSettings,
    child_env,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _file(path: Path, text: str = "x\n") -> Path:
    path.write_text(text)
    return path


def _changed(tmp: Path) -> list[settings._Section]:
    """Every section with every setting off its default: relative paths (the child runs
    elsewhere), text that JSON or a shell would mangle, lists, tables, floats, flags."""
    pem = _file(tmp / "cert.pem")
    return [
        BrokerSettings(
            host="10.0.0.1",
            port=9500,
            controller_port=9600,
            brokers=3,
            data_dir=Path("b/data"),
            log_dir=Path("b/logs"),
            heap="1g",
            start_timeout_s=12.5,
            jars_dir=Path("jars"),
            sasl=True,
            sasl_username="op",
            sasl_password_file=Path("b/pw"),
            sasl_users=["app", "reader=b/reader.pw"],
            acl=True,
        ),
        SparkSettings(
            master="spark://h:7077",
            app_name="a b",
            checkpoint_dir="s3a://bucket/cp",
            jars_dir=Path("sjars"),
            shuffle_partitions=4,
            input_tasks=2,
            driver_memory="2g",
            ui=True,
            conf={"spark.x": "1", "spark.y": 'say "hi", then=go'},
        ),
        SparkClusterSettings(
            host="0.0.0.0",
            port=7100,
            ui_port=7200,
            worker_cores=3,
            worker_memory="3g",
            daemon_memory="300m",
            data_dir=Path("spark"),
            start_timeout_s=0.1,
        ),
        PipelineSettings(
            bootstrap="k1:9092,k2:9092",
            trigger="realtime",
            interval="5 seconds",
            realtime_batch="1 minute",
            partitions=7,
            version="v2",
        ),
        ServeSettings(
            bootstrap="k1:9092",
            node_id="n7",
            host="0.0.0.0",
            port=9001,
            advertise="https://n7.example:9001",
            data_dir=Path("n7"),
            store_memory_mb=64,
            workers=3,
            tables=["q=quotes,store=memory,standby=2", "b=bars,format=avro,schema=b.avsc"],
            standby_replicas=2,
            cluster="blue",
            dead_letter_topic="dlq",
            session_timeout_ms=9000,
            ready_max_lag=5,
            linger_s=0.25,
            forward_timeout_ms=300,
            forward_hedge_percentile=95.5,
            forward_hedge_floor_ms=3,
            forward_hedge_cap_ms=0,
            view_refresh_ms=60,
            expiry_sweep_s=2.5,
        ),
        LimitsSettings(
            max_body_bytes=2048,
            max_multiget_keys=3,
            window_cache_bytes=5,
            max_connections=4,
            max_watches=12,
            max_watch_pending=13,
            max_parked_waits=5,
            max_parked_waits_per_caller=6,
            max_watches_per_caller=7,
            max_requests_per_caller=14,
            reserved_connections=1,
            header_timeout_s=1.5,
            rate_limit=0.1,
            rate_burst=8,
            rate_clients=9,
            auth_failure_rate=0.0,
            auth_failure_burst=11,
            tenants=TenantLimits(
                claim="org",
                rate=2.5,
                scans=3,
                quotas={"a b": TenantQuota(rate=7.0, watches=2)},
            ),
        ),
        AuthSettings(
            mode="jwt",
            jwt_secret_file=Path("secret"),
            jwt_public_key_file=Path("key.pem"),
            jwt_jwks_file=Path("jwks.json"),
            jwt_audience="kiq-api",
            jwt_issuer="https://issuer/",
            jwt_leeway_s=5.0,
            cluster_secret_file=Path("cluster"),
            token_cache_size=12,
        ),
        TlsSettings(cert=Path(pem.name), key=Path(pem.name), ca=pem),
        KafkaSettings(
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="svc",
            sasl_password_file=_file(tmp / "kafka-pw"),
            ssl_ca_file=Path(pem.name),
        ),
        AppSettings(
            name="shop",
            pipelines=["app.py:build"],
            endpoints=["app.py:routes", "kiq.apps.stocks.api:declare"],
            nodes=5,
            port=9100,
            bootstrap="k1:9092",
            home=Path("state"),
            topics={"orders": 6, "stores": 2},
            partitions=6,
            feeds=[["kiq", "feed", "stocks"], ["python", "feed.py", "--say", "a b"]],
            examples=["curl -s '{url}/v1/tables/x/range?limit=5'"],
        ),
        FeedSettings(
            bootstrap="k1:9092",
            topic="ticks",
            symbols=7,
            exchanges=["IEX", "NYSE"],
            rate=2.5,
            seed=7,
            trade_ratio=0.5,
            create_topic=False,
            partitions=3,
            linger_ms=0,
        ),
    ]


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def _absolute(section: settings._Section) -> settings._Section:
    """``section`` as its child sees it: its paths absolute, from the parent's directory."""
    paths = {k: v.absolute() for k, v in section if isinstance(v, Path)}
    return section.model_copy(update=paths)


def _as_child(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, where: Path) -> Any:
    """The environment of a child in another directory: ``env`` only, of kiq's names."""
    where.mkdir(exist_ok=True)
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(where)


def test_the_trip_covers_every_section_and_every_setting(tmp_path: Path) -> None:
    sections = _changed(tmp_path)
    assert {type(s) for s in sections} == _subclasses(settings._Section)
    for section in sections:
        for name, field in type(section).model_fields.items():
            default = field.get_default(call_default_factory=True)
            assert getattr(section, name) != default, f"{type(section).__name__}.{name}"


def test_every_section_survives_the_trip_through_a_childs_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = _changed(tmp_path)
    for section in sections:
        expected = _absolute(section)
        _as_child(section.as_env(), monkeypatch, tmp_path / "child")
        assert settings.load(type(section)) == expected, type(section).__name__
        monkeypatch.chdir(tmp_path)


def test_an_unset_setting_stays_unset_and_names_follow_the_section() -> None:
    env = AuthSettings(jwt_audience="a").as_env()
    assert env["KIQ_AUTH_JWT_AUDIENCE"] == "a"
    assert "KIQ_AUTH_MODE" not in env and "KIQ_AUTH_JWT_ISSUER" not in env
    assert set(LimitsSettings().as_env()) == {
        f"KIQ_LIMITS_{name.upper()}" for name in LimitsSettings.model_fields
    }


def test_a_nodes_settings_survive_the_trip_to_a_child_kiq_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `kiq up` hands each node: its file's sections, flags over them, one environment."""
    app_file = _file(
        tmp_path / "app.toml",
        '[serve]\ntables = ["t=t,standby=0"]\nstore_memory_mb = 32\n'
        '[app]\nendpoints = ["routes.py:declare"]\n[limits]\nrate_limit = 5\n',
    )
    monkeypatch.setenv("KIQ_AUTH_JWT_LEEWAY_S", "7")
    node = NodeSettings.load(
        app_file, serve={"bootstrap": "k:1", "port": None}, limits={"max_connections": 9}
    )
    assert node.serve.store_memory_mb == 32 and node.auth.jwt_leeway_s == 7
    assert (node.limits.rate_limit, node.limits.max_connections) == (5, 9)
    env = node.as_env()
    assert env["KIQ_CONFIG"] == str(app_file.absolute())
    expected = tuple(_absolute(s) for s in node.sections)
    _as_child(env, monkeypatch, tmp_path / "child")
    again = NodeSettings.load()
    assert again.sections == expected
    assert again.config_file == node.config_file == app_file.absolute()
    assert again.serve.data_dir == tmp_path / ".kiq" / "node-1"  # the parent's, not the child's


def test_child_env_is_the_sections_together_with_the_file(tmp_path: Path) -> None:
    serve, kafka = ServeSettings(bootstrap="k:1"), KafkaSettings()
    env = child_env(serve, kafka, config=Path("app.toml"))
    assert env == {"KIQ_CONFIG": str(tmp_path / "app.toml"), **serve.as_env(), **kafka.as_env()}
    assert child_env() == {}

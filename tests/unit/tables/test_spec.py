from __future__ import annotations

from pathlib import Path

import pytest

import kiq.tables
from kiq.errors import ConfigError
from kiq.tables import TableSpec, parse_table


@pytest.fixture
def schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ev.avsc"
    path.write_text('{"type": "record", "name": "Ev", "fields": [{"name": "id", "type": "long"}]}')
    return path


def test_minimal():
    assert parse_table("quotes=stock-quotes") == TableSpec(
        name="quotes",
        topic="stock-quotes",
        store="rocksdb",
        format="json",
        schema_file=None,
        standby_replicas=1,
        global_=False,
    )


def test_memory_global():
    spec = parse_table("ref=symbols,store=memory,global")
    assert (spec.name, spec.topic, spec.store, spec.global_) == ("ref", "symbols", "memory", True)


def test_avro_with_schema(schema: Path):
    spec = parse_table("ev=events,format=avro,schema=ev.avsc")
    assert spec.format == "avro"
    assert spec.schema_file == Path("ev.avsc")


def test_standby_and_default_standby():
    assert parse_table("t=x,standby=0").standby_replicas == 0
    assert parse_table("t=x", default_standby=3).standby_replicas == 3
    assert parse_table("t=x,standby=2", default_standby=3).standby_replicas == 2


def test_spaces_are_tolerated():
    spec = parse_table(" t = x , store = memory , global ")
    assert (spec.name, spec.topic, spec.store, spec.global_) == ("t", "x", "memory", True)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("quotes", "expected NAME=TOPIC"),
        ("=topic", "expected NAME=TOPIC"),
        ("quotes=", "expected NAME=TOPIC"),
        ("q=t,store=memory,store=rocksdb", "given twice"),
        ("q=t,global=yes", "takes no value"),
        ("q=t,colour=red", "unknown option"),
        ("q=t,store=", "needs a value"),
        ("q=t,standby=two", "standby must be a number"),
    ],
)
def test_bad_syntax_shows_the_syntax(text: str, problem: str):
    with pytest.raises(ConfigError) as info:
        parse_table(text)
    message = str(info.value)
    assert problem in message
    assert "NAME=TOPIC[,store=memory]" in message
    assert repr(text) in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("bad name=t", "table name 'bad name' is invalid"),
        ("a/b=t", "is invalid"),
        (f"{'n' * 101}=t", "is invalid"),
        ("q=top ic", "not a valid Kafka topic name"),
        ("q=t,store=lmdb", "store 'lmdb' is unknown: use one of rocksdb, memory"),
        ("q=t,format=xml", "use one of json, avro, raw"),
        ("q=t,format=avro", "needs a schema file"),
        ("q=t,format=avro,schema=missing.avsc", "does not exist"),
        ("q=t,schema=x.avsc", "only applies to format avro"),
        ("q=t,standby=11", "from 0 to 10"),
        ("q=t,standby=-1", "from 0 to 10"),
    ],
)
def test_invalid_specs(text: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--table") as info:
        parse_table(text)
    assert problem in str(info.value)


def test_spec_validates_without_the_parser():
    assert TableSpec(name="a.b_c-1", topic="t").name == "a.b_c-1"
    with pytest.raises(ConfigError, match="standby"):
        TableSpec(name="a", topic="t", standby_replicas=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="table name"):
        TableSpec(name="", topic="t")


def test_spec_is_frozen():
    spec = TableSpec(name="a", topic="t")
    with pytest.raises(AttributeError):
        spec.name = "b"  # type: ignore[misc]


def test_exports():
    assert sorted(kiq.tables.__all__) == [
        "MAX_KEY_BYTES",
        "TableRuntime",
        "TableSpec",
        "ValueCodec",
        "codec_for",
        "parse_table",
    ]

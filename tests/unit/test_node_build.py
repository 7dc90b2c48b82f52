"""The composition root: a node and its app from its settings alone, nothing left in the process.

Kafka's side is stood in for where the root would connect; what each stand-in records
is the security it was handed.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kiq import node_build
from kiq.errors import ConfigError
from kiq.kafka import PLAINTEXT, KafkaSecurity
from kiq.node_build import BuiltNode, LogWriter, build_node
from kiq.settings import NodeSettings
from kiq.tables import checks
from kiq.tables.declared import Declared

PARTITIONS = 2


class Kafka:
    """Where the root connects: each call and client records the security it was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: dict[str, list[tuple[str, KafkaSecurity]]] = {}
        self.openers: dict[str, Any] = {}
        kafka = self

        def topic_partitions(bootstrap: str, topic: str, *, security: KafkaSecurity) -> int | None:
            kafka.saw(bootstrap, "topic_partitions", security)
            return None if topic == "kiq-dead-letters" else PARTITIONS  # the node creates it

        def create_topics(bootstrap: str, topics: Any, *, security: KafkaSecurity) -> None:
            kafka.saw(bootstrap, "create_topics", security)

        def client(name: str) -> type:
            class Client:
                def __init__(self, bootstrap: str, *args: Any, security: KafkaSecurity, **kw: Any):
                    kafka.saw(bootstrap, name, security)

            return Client

        real_opener = node_build.store_opener

        def store_opener(runtimes: Any, data_dir: Path, budget: Any) -> Any:
            opener = real_opener(runtimes, data_dir, budget)
            kafka.openers[data_dir.name] = opener
            return opener

        class Catalog:
            """The table catalog: empty, so the node serves its --table list alone."""

            @staticmethod
            def read_latest(bootstrap: str, topic: str, *, security: KafkaSecurity) -> dict:
                kafka.saw(bootstrap, "read_latest", security)
                return {}

        monkeypatch.setattr(node_build, "compacted", Catalog)
        monkeypatch.setattr(node_build, "topic_partitions", topic_partitions)
        monkeypatch.setattr(node_build, "create_topics", create_topics)
        monkeypatch.setattr(node_build, "store_opener", store_opener)
        for name in ("GroupMember", "PartitionReader", "DeadLetters", "AsyncProducer"):
            monkeypatch.setattr(node_build, name, client(name))

    def saw(self, bootstrap: str, what: str, security: KafkaSecurity) -> None:
        self.seen.setdefault(bootstrap, []).append((what, security))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _settings(tmp_path: Path, name: str, memory_mb: int, **kafka: Any) -> NodeSettings:
    return NodeSettings.load(
        serve={
            "bootstrap": f"{name}:9092",
            "node_id": name,
            "data_dir": tmp_path / name,
            "tables": ["t=t,standby=0"],
            "store_memory_mb": memory_mb,
        },
        kafka=kafka,
    )


def test_two_nodes_in_one_process_keep_their_own_kafka_security_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka = Kafka(monkeypatch)
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_username": "alice",
        "sasl_password_file": password,
    }
    a = build_node(_settings(tmp_path, "a", 8, **sasl))
    b = build_node(_settings(tmp_path, "b", 16))  # built after a: a global would now be b's

    alice = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "s3cret")
    assert (a.kafka, b.kafka) == (alice, PLAINTEXT)
    connects = [
        "read_latest",
        "topic_partitions",
        "create_topics",
        "GroupMember",
        "PartitionReader",
    ]
    for built, name in ((a, "a"), (b, "b")):
        seen = kafka.seen[f"{name}:9092"]
        assert sorted({what for what, _ in seen}) == sorted([*connects, "DeadLetters"])
        assert {security for _, security in seen} == {built.kafka}

    assert (a.budget.total_bytes, b.budget.total_bytes) == (8 << 20, 16 << 20)
    store = kafka.openers["a"]("t", 0)
    try:
        store.apply([(b"k%d" % i, bytes(1000), i) for i in range(2000)], 1999)
        assert a.budget.usage()[1] > 0  # a's store counts in a's budget ...
        assert b.budget.usage() == (0, 0)  # ... and not in b's
    finally:
        store.close()
    _close(a)
    _close(b)


def test_the_writer_connects_with_the_nodes_security(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = Kafka(monkeypatch)
    mine = KafkaSecurity("SASL_SSL", "SCRAM-SHA-256", "w", "p")

    class Producer:
        def __init__(self, bootstrap: str, *, security: KafkaSecurity) -> None:
            kafka.saw(bootstrap, "AsyncProducer", security)

        async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
            return 0, 7

    monkeypatch.setattr(node_build, "AsyncProducer", Producer)
    writer = LogWriter("w:9092", mine)
    assert kafka.seen == {}  # made at the first write
    assert asyncio.run(writer.send("t", b"k", b"v")) == (0, 7)
    assert kafka.seen == {"w:9092": [("AsyncProducer", mine)]}


def test_the_root_checks_the_settings_before_it_connects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka = Kafka(monkeypatch)
    bad_route = NodeSettings.load(
        serve={"tables": ["t=t"], "data_dir": tmp_path / "n"},
        app={"endpoints": ["kiq.apps.stocks.api:nope"]},
    )
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        build_node(bad_route)
    open_host = NodeSettings.load(serve={"tables": ["t=t"], "host": "0.0.0.0"})
    with pytest.raises(ConfigError, match="not a loopback address"):
        build_node(open_host)
    assert kafka.seen == {}


def test_the_built_node_advertises_the_scheme_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Kafka(monkeypatch)
    built = build_node(_settings(tmp_path, "n", 8))
    assert built.settings.serve.advertised_url == "http://127.0.0.1:8080"
    assert built.node.url == built.settings.serve.advertised_url
    assert built.server_tls is None and built.security.tokens is None
    _close(built)


def _close(built: BuiltNode) -> None:
    built.app.peers.close()


def test_a_hostile_or_unservable_catalog_never_stops_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    checks._said.clear()  # each refusal is logged once per process
    Kafka(monkeypatch)
    asked = node_build.topic_partitions

    def topic_partitions(bootstrap: str, topic: str, *, security: KafkaSecurity) -> int | None:
        return None if topic == "gone-topic" else asked(bootstrap, topic, security=security)

    hostile = {
        "table:kiq//abs/outside": {"table": "/abs/outside", "topic": "x", "key": ["k"]},
        "table:kiq/..": {"table": "..", "topic": "y", "key": ["k"]},
        "table:kiq/badsep": {"table": "badsep", "topic": "z", "key": ["a", "b"], "sep": "||"},
        "table:kiq/nokey": {"table": "nokey", "topic": "w", "key": []},
    }
    declared = [
        Declared(table="later", topic="gone-topic", key=("k",)),  # its topic not there yet
        Declared(table="aaa", topic="t", key=("k",)),  # the operator's t=t reads that topic
        Declared(table="real", topic="real-topic", key=("k",)),
    ]
    records = {key: msgspec.json.encode(value) for key, value in hostile.items()}
    records.update({d.catalog_key: d.encode() for d in declared})

    class Catalog:
        @staticmethod
        def read_latest(bootstrap: str, topic: str, *, security: KafkaSecurity) -> dict:
            return records

    monkeypatch.setattr(node_build, "compacted", Catalog)
    monkeypatch.setattr(node_build, "topic_partitions", topic_partitions)
    settings = NodeSettings.load(
        serve={"bootstrap": "k:9092", "data_dir": tmp_path / "n", "tables": ["*", "t=t,standby=0"]}
    )
    built = build_node(settings)
    try:
        assert sorted(built.node.tables) == ["real", "t"]
        assert caplog.text.count("catalog record refused") == len(hostile)
        assert "table declaration not served table=aaa" in caplog.text
        assert "table declaration not served yet table=later" in caplog.text
        assert stat.S_IMODE((tmp_path / "n").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "n" / "tables").stat().st_mode) == 0o700
    finally:
        _close(built)

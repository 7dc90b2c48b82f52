"""``create_topics`` describes first, creates only what is missing, and when the broker
will not create a topic (or say whether it exists) names the commands that make it so.

A fake admin client stands in for the broker: these are the decisions, not the wire.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kiq.errors import KiqError, SetupError
from kiq.kafka import KafkaSecurity, admin, create_topics, topic_partitions

BOOT = "k1:9092,k2:9092"
APP = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "app", "secret")


def _done(value: Any = None, error: int | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(KafkaError(error)))
    return future


@dataclass
class FakeAdmin:
    """Topics that exist (name → partitions), those this user may not see, and what the
    broker answers a creation with (by name; default: it is made)."""

    topics: dict[str, int] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    on_create: dict[str, int] = field(default_factory=dict)
    brokers: int = 1
    created: list[Any] = field(default_factory=list)
    described: list[list[str]] = field(default_factory=list)

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        names = list(topics.topic_names)
        self.described.append(names)
        futures = {}
        for name in names:
            if name in self.hidden:
                futures[name] = _done(error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
            elif name in self.topics:
                parts = [SimpleNamespace(id=i) for i in range(self.topics[name])]
                futures[name] = _done(SimpleNamespace(name=name, partitions=parts))
            else:
                futures[name] = _done(error=KafkaError.UNKNOWN_TOPIC_OR_PART)
        return futures

    def create_topics(self, new: list[Any], **_: Any) -> dict[str, Future[Any]]:
        self.created.extend(new)
        futures = {}
        for t in new:
            code = self.on_create.get(t.topic)
            if code is None:
                self.topics[t.topic] = t.num_partitions
            futures[t.topic] = _done(error=code)
        return futures

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        brokers = {i: object() for i in range(self.brokers)}
        metas = {}
        for name, n in self.topics.items():
            parts = {i: SimpleNamespace(leader=1) for i in range(n)}
            metas[name] = SimpleNamespace(error=None, partitions=parts)
        if topic is not None and topic in self.hidden:
            metas = {topic: SimpleNamespace(error=KafkaError(29), partitions={})}
        return SimpleNamespace(brokers=brokers, topics=metas)

    def poll(self, timeout: float) -> int:
        return 0


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()
    monkeypatch.setattr(admin, "_admin", lambda *a, **k: fake)
    return fake


def test_existing_topics_are_described_once_and_not_created(broker: FakeAdmin):
    broker.topics = {"words": 3, "word-counts": 3}
    create_topics(BOOT, {"words": 3, "word-counts": 3}, security=APP)
    assert broker.described == [["words", "word-counts"]]
    assert broker.created == []


def test_only_the_missing_topics_are_created_with_the_clusters_replication(broker: FakeAdmin):
    broker.topics, broker.brokers = {"words": 3}, 3
    create_topics(BOOT, {"words": 3, "word-counts": 3}, config={"cleanup.policy": "compact"})
    [made] = broker.created
    assert (made.topic, made.num_partitions, made.replication_factor) == ("word-counts", 3, 3)
    assert made.config == {"min.insync.replicas": "2", "cleanup.policy": "compact"}


def test_a_topic_another_client_made_meanwhile_is_fine(broker: FakeAdmin):
    broker.on_create = {"words": KafkaError.TOPIC_ALREADY_EXISTS}

    def made_by_another(new: list[Any], **_: Any) -> dict[str, Future[Any]]:
        broker.topics["words"] = 3
        return {"words": _done(error=KafkaError.TOPIC_ALREADY_EXISTS)}

    broker.create_topics = made_by_another  # type: ignore[method-assign]
    create_topics(BOOT, {"words": 3})


def test_an_existing_topic_with_another_partition_count_is_an_error(broker: FakeAdmin):
    broker.topics = {"words": 4}
    with pytest.raises(KiqError, match="'words' exists with 4 partitions, not 3"):
        create_topics(BOOT, {"words": 3, "other": 1})
    assert broker.created == []


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
    ],
)
def test_a_refused_creation_names_each_topic_its_settings_and_the_acls(
    broker: FakeAdmin, code: int
):
    broker.topics = {"words": 3}
    broker.on_create = {"word-counts": code, "word-counts-dlq": code}
    with pytest.raises(SetupError) as caught:
        create_topics(
            BOOT,
            {"words": 3, "word-counts": 3, "word-counts-dlq": 3},
            config={"segment.ms": "600000", "cleanup.policy": "compact"},
            security=APP,
        )
    message = str(caught.value)
    assert f"Kafka at {BOOT} does not let kiq's user (User:app) create " in message
    assert "create topics 'word-counts', 'word-counts-dlq' (" in message
    assert KafkaError(code).name() in message
    lines = message.splitlines()
    assert (
        f"  kafka-topics.sh --bootstrap-server {BOOT} --create --topic word-counts "
        "--partitions 3 --replication-factor 1 --config cleanup.policy=compact "
        "--config segment.ms=600000"
    ) in lines
    assert any("--create --topic word-counts-dlq --partitions 3" in line for line in lines)
    assert "--topic words " not in message  # it exists
    assert lines[-1] == (
        f"  kafka-acls.sh --bootstrap-server {BOOT} --add --allow-principal User:app "
        "--operation Describe --operation Read --operation Write "
        "--topic word-counts --topic word-counts-dlq"
    )
    assert "secret" not in message


def test_a_topic_kiq_may_not_describe_is_neither_created_nor_taken_as_missing(
    broker: FakeAdmin,
):
    broker.hidden = {"kiq-dead-letters"}
    with pytest.raises(SetupError) as caught:
        create_topics(BOOT, {"kiq-dead-letters": 1, "kiq-catalog": 1}, security=APP)
    message = str(caught.value)
    assert "(User:app) DESCRIBE topic 'kiq-dead-letters', so kiq cannot tell whether" in message
    assert "--create --topic kiq-dead-letters --partitions 1 --replication-factor 1" in message
    assert "--topic kiq-catalog" not in message  # kiq may create that one, and did
    assert [t.topic for t in broker.created] == ["kiq-catalog"]


def test_refusals_of_both_kinds_come_in_one_message(broker: FakeAdmin):
    broker.hidden = {"a"}
    broker.on_create = {"b": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    with pytest.raises(SetupError) as caught:
        create_topics(BOOT, {"a": 1, "b": 2}, security=APP)
    message = str(caught.value)
    assert "create topic 'b' (TOPIC_AUTHORIZATION_FAILED" in message
    assert "nor DESCRIBE topic 'a'" in message
    assert "--topic a --partitions 1" in message and "--topic b --partitions 2" in message


def test_without_sasl_the_principal_is_left_for_the_admin_to_fill_in(broker: FakeAdmin):
    broker.on_create = {"t": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    with pytest.raises(SetupError, match="--allow-principal User:KIQ_PRINCIPAL "):
        create_topics(BOOT, {"t": 1})


def test_other_creation_errors_are_not_taken_for_a_refusal(broker: FakeAdmin):
    broker.on_create = {"t": KafkaError.INVALID_REPLICATION_FACTOR}
    with pytest.raises(KiqError, match="could not create topic 't'") as caught:
        create_topics(BOOT, {"t": 1})
    assert not isinstance(caught.value, SetupError)


def test_topic_partitions_of_a_topic_kiq_may_not_describe_is_none_and_says_why(
    broker: FakeAdmin, caplog: pytest.LogCaptureFixture
):
    broker.topics, broker.hidden = {"words": 3}, {"secret"}
    assert topic_partitions(BOOT, "words", security=APP) == 3
    assert topic_partitions(BOOT, "absent", security=APP) is None
    with caplog.at_level(logging.WARNING, logger="kiq.kafka.admin"):
        assert topic_partitions(BOOT, "secret", security=APP) is None
    assert "User:app may not DESCRIBE topic secret" in caplog.text

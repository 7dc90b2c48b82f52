"""kiq with the credentials a managed Kafka gives: use topics an administrator made, no more.

One broker started by `kiq broker start --sasl --acl`'s code: Kafka's StandardAuthorizer,
the super user ``kiq`` and a user ``app`` who may do nothing an ACL does not grant. The
super user creates every topic the word-count pipeline and a node use, and grants ``app``
the least set of ACLs docs/security.md lists ("Kafka ACLs"); as ``app``, the pipeline
counts words a node's word endpoint writes, and the node serves the counts. A topic the
administrator did not make stops the pipeline and the node at once, with the commands
that make it (its partitions, replication and settings) and grant ``app`` its ACLs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kiq.catalog import CATALOG_TOPIC, DEAD_LETTERS, WORD_COUNTS, WORDS
from kiq.kafka import create_topics, topic_partitions
from kiq.kafka.config import client_config
from kiq.pipelines.runner import COMPACTED
from kiq.runtime.broker import LocalBroker
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline
from kiq.runtime.ports import free_ports
from kiq.settings import BrokerSettings

pytestmark = pytest.mark.spark

APP = "app"
PARTITIONS = 3
WORD_LETTERS = f"{WORD_COUNTS}-dlq"  # the word-count table's dead letters
# Every topic the word-count pipeline and a node use: name -> (partitions, settings).
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    WORDS: (PARTITIONS, {}),
    WORD_COUNTS: (PARTITIONS, COMPACTED),
    WORD_LETTERS: (1, {}),
    DEAD_LETTERS: (1, {}),
    CATALOG_TOPIC: (1, {"cleanup.policy": "compact"}),
}
# The consumer groups (docs/security.md): READ on the nodes' serving group (the --cluster
# name); DESCRIBE on the groups of the readers that only assign partitions (the nodes'
# replicas, and the catalog's readers in nodes and pipelines): librdkafka looks their
# coordinator up all the same, and a refusal is an error the reader meets. Spark's Kafka
# source needs none: its consumers assign partitions and commit nothing (its group ids,
# spark-kafka-source-..., are never looked up), in micro-batches as in Real-Time Mode.
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
GROUPS = {
    ("kiq", LITERAL): AclOperation.READ,
    # the nodes' replica readers and the catalog's readers (kiq-reader-kiq-catalog)
    ("kiq-reader-", PREFIXED): AclOperation.DESCRIBE,
}
WORDS_TEXT = "kafka spark kiq kafka acl kafka spark"


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    root = tmp_path_factory.mktemp("acl-broker")
    port, controller = free_ports(2)
    local = LocalBroker(
        BrokerSettings(
            port=port,
            controller_port=controller,
            data_dir=root / "data",
            log_dir=root / "logs",
            sasl=True,
            sasl_users=[APP],
            acl=True,
            start_timeout_s=240,
        )
    )
    try:
        local.start()
        admin = AdminClient(client_config(local.bootstrap, security=local.security))
        made = admin.create_topics(
            [NewTopic(t, n, 1, config=c) for t, (n, c) in TOPICS.items()], operation_timeout=30
        )
        for future in made.values():
            future.result()
        _grant(admin, _least_acls())
        # The brokers apply ACLs as they read them from the metadata log: soon, not at once.
        app = local.security_of(APP)
        assert until(
            lambda: all(topic_partitions(local.bootstrap, t, security=app) for t in TOPICS), 30
        ), "app cannot see its topics 30s after its ACLs were made"
        yield local
    finally:
        local.stop()


def _least_acls() -> list[AclBinding]:
    """What ``app`` may do: the pipeline's and the node's needs together, nothing else."""

    def allow(kind: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation):
        return AclBinding(kind, name, pattern, f"User:{APP}", "*", op, AclPermissionType.ALLOW)

    literal = ResourcePatternType.LITERAL
    # Describe, and Read or Write as each topic's readers and writers need (docs/security.md).
    topic_ops = {
        WORDS: ("READ", "WRITE"),  # the pipeline reads it; the node's word endpoint writes it
        WORD_COUNTS: ("READ", "WRITE"),  # the pipeline writes it; the node reads it
        WORD_LETTERS: ("WRITE",),  # the pipeline's dead letters
        DEAD_LETTERS: ("WRITE",),  # the node's dead letters
        CATALOG_TOPIC: ("READ", "WRITE"),  # pipelines declare their tables; nodes read them
    }
    acls = [
        allow(ResourceType.TOPIC, topic, literal, AclOperation[op])
        for topic, ops in topic_ops.items()
        for op in ("DESCRIBE", *ops)
    ]
    acls += [
        allow(ResourceType.GROUP, group, pattern, op) for (group, pattern), op in GROUPS.items()
    ]
    return acls


def _grant(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls, request_timeout=30).values():
        future.result()


@pytest.fixture
def as_app(acl_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The processes this test starts connect as ``app``; the settings, for others."""
    env = {
        "KIQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KIQ_KAFKA_SASL_MECHANISM": "PLAIN",
        "KIQ_KAFKA_SASL_USERNAME": APP,
        "KIQ_KAFKA_SASL_PASSWORD_FILE": str(acl_broker.users[APP]),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def kiq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
        check=False,
    )


def until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def test_app_may_use_the_topics_it_was_granted_and_nothing_else(acl_broker: LocalBroker):
    bootstrap, app = acl_broker.bootstrap, acl_broker.security_of(APP)
    assert topic_partitions(bootstrap, WORDS, security=app) == PARTITIONS
    create_topics(bootstrap, {WORDS: PARTITIONS}, security=app)  # it exists: nothing to do
    client = AdminClient(client_config(bootstrap, security=app))
    refused = client.create_topics([NewTopic("app-made", 1, 1)], operation_timeout=10)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        refused["app-made"].result()
    grant = _least_acls()[:1]
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        _grant(client, grant)


@pytest.mark.usefixtures("as_app")
def test_the_word_count_pipeline_and_a_node_as_a_user_with_acls_only(
    acl_broker: LocalBroker, tmp_path: Path
):
    bootstrap = acl_broker.bootstrap
    pipeline = LocalPipeline(
        ("wordcount",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    node = LocalNode(
        "n1", bootstrap, [f"{WORD_COUNTS}={WORD_COUNTS}"], tmp_path / "n1", tmp_path / "n1.log"
    )
    try:
        pipeline.start()
        node.start().wait_ready(180)
        written = httpx.post(f"{node.url}/v1/words", json={"text": WORDS_TEXT}, timeout=10)
        assert written.status_code == 202, written.text

        def counted() -> bool:
            resp = httpx.get(f"{node.url}/v1/words/kafka", timeout=10)
            return resp.status_code == 200 and resp.json()["count"] == 3

        if not until(counted, 420):
            tail = pipeline.log_file.read_text(errors="replace")[-4000:]
            pytest.fail(
                f"no count of 3 for 'kafka' after 420s; the driver's log ends:\n{tail}\n"
                f"the node's:\n{node.tail()}"
            )
        assert httpx.get(f"{node.url}/v1/words/spark", timeout=10).json()["count"] == 2
        for log in (pipeline.log_file, node.log_file):
            text = log.read_text(errors="replace")
            assert "Traceback" not in text, text[text.find("Traceback") :][:3000]
            assert "AUTHORIZATION_FAILED" not in text, log
    finally:
        pipeline.stop()
        node.stop()


_UNMADE_PIPELINE = """
def build(ctx):
    words = ctx.read("words").where("__key IS NOT NULL")
    counts = words.groupBy(words["__key"].alias("word")).count()
    ctx.write_table("uncreated-counts", counts.select("word", "count"), key="word")
"""


@pytest.mark.usefixtures("as_app")
def test_a_topic_not_made_stops_the_pipeline_with_the_commands_that_make_it(
    acl_broker: LocalBroker, tmp_path: Path
):
    """``app`` may describe topics named ``uncreated-...`` but not create them."""
    admin = AdminClient(client_config(acl_broker.bootstrap, security=acl_broker.security))
    _grant(
        admin,
        [
            AclBinding(
                ResourceType.TOPIC,
                "uncreated-",
                ResourcePatternType.PREFIXED,
                f"User:{APP}",
                "*",
                AclOperation.DESCRIBE,
                AclPermissionType.ALLOW,
            )
        ],
    )
    (tmp_path / "unmade.py").write_text(_UNMADE_PIPELINE)
    started = time.monotonic()
    done = kiq(
        "pipeline",
        "run",
        f"{tmp_path / 'unmade.py'}:build",
        "--bootstrap",
        acl_broker.bootstrap,
        "--master",
        "local[2]",
        "--trigger",
        "microbatch",
        "--checkpoint",
        str(tmp_path / "checkpoints"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert f"Kafka at {acl_broker.bootstrap} does not let kiq's user (User:app) create" in message
    assert "create topic 'uncreated-counts' (TOPIC_AUTHORIZATION_FAILED" in message
    assert (
        f"kafka-topics.sh --bootstrap-server {acl_broker.bootstrap} --create "
        "--topic uncreated-counts --partitions 3 --replication-factor 1 "
        "--config cleanup.policy=compact" in message
    ), message
    assert "kafka-acls.sh" in message and "--allow-principal User:app" in message
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 150


@pytest.mark.usefixtures("as_app")
def test_a_dead_letter_topic_app_may_not_describe_stops_the_node(
    acl_broker: LocalBroker, tmp_path: Path
):
    done = kiq(
        "serve",
        "--bootstrap",
        acl_broker.bootstrap,
        "--port",
        str(free_ports(1)[0]),
        "--data-dir",
        str(tmp_path / "n"),
        "--table",
        f"{WORD_COUNTS}={WORD_COUNTS}",
        env={"KIQ_SERVE_DEAD_LETTER_TOPIC": "secret-dead-letters"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert "does not let kiq's user (User:app) DESCRIBE topic 'secret-dead-letters'" in message
    assert "--topic secret-dead-letters --partitions 1 --replication-factor 1" in message
    assert "Traceback" not in done.stderr

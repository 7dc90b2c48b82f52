"""Every Kafka client kiq makes, through a broker that takes only SASL (PLAIN).

One broker started by `kiq broker`'s code with ``sasl``; kiq's commands are told
the credentials as an operator would (``KIQ_KAFKA_*``). Through it: a feed
produces ticks, a node serves them as a table, the node's word endpoint writes
words, and the word-count pipeline (Spark's Kafka source and sink) counts them
into the table the node serves. Wrong credentials stop a node and a feed with an
error that names the settings to fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, ping, topic_partitions
from kiq.pipelines.runner import COMPACTED
from kiq.runtime.broker import LocalBroker
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline
from kiq.runtime.ports import free_ports
from kiq.settings import BrokerSettings

pytestmark = pytest.mark.spark

WORDS = ["kafka", "spark", "kiq", "kafka", "sasl", "kafka", "spark"]


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    root = tmp_path_factory.mktemp("sasl-broker")
    port, controller = free_ports(2)
    local = LocalBroker(
        BrokerSettings(
            port=port,
            controller_port=controller,
            data_dir=root / "data",
            log_dir=root / "logs",
            sasl=True,
            start_timeout_s=240,
        )
    )
    try:
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture
def credentials(sasl_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The processes this test starts use the broker's user (it hands its own calls one)."""
    monkeypatch.setenv("KIQ_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KIQ_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("KIQ_KAFKA_SASL_USERNAME", sasl_broker.settings.sasl_username)
    monkeypatch.setenv("KIQ_KAFKA_SASL_PASSWORD_FILE", str(sasl_broker.password_file))


def kiq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def until(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def test_the_broker_refuses_clients_without_credentials(sasl_broker: LocalBroker):
    assert not ping(sasl_broker.bootstrap)  # plaintext: no answer on a SASL port
    assert ping(sasl_broker.bootstrap, security=sasl_broker.security)


@pytest.mark.usefixtures("credentials")
def test_nodes_a_feed_and_a_pipeline_through_sasl(sasl_broker: LocalBroker, tmp_path: Path):
    bootstrap, security = sasl_broker.bootstrap, sasl_broker.security
    create_topics(bootstrap, {"ticks": 3, "words": 3}, security=security)
    create_topics(bootstrap, {"word-counts": 3}, config=COMPACTED, security=security)
    assert topic_partitions(bootstrap, "ticks", security=security) == 3

    feed = kiq(
        "feed",
        "stocks",
        "--bootstrap",
        bootstrap,
        "--topic",
        "ticks",
        "--symbols",
        "20",
        "--rate",
        "200",
        "--duration",
        "2",
    )
    assert feed.returncode == 0, feed.stdout + feed.stderr

    pipeline = LocalPipeline(
        ("wordcount",), bootstrap, tmp_path / "checkpoints", tmp_path / "pipeline.log", partitions=3
    )
    node = LocalNode(
        "n1",
        bootstrap,
        ["ticks=ticks", "word-counts=word-counts"],
        tmp_path / "n1",
        tmp_path / "n1.log",
    )
    try:
        pipeline.start()
        node.start().wait_ready(120)
        # The feed's ticks, served by the node that read them through SASL.
        meta = node.metadata()["tables"]["ticks"]["partitions"]
        assert sum(p["local"]["end_offset"] for p in meta) >= 300, meta
        first = httpx.get(f"{node.url}/v1/tables/ticks/range?limit=1", timeout=10).json()
        symbol = first["items"][0]["key"]
        tick = httpx.get(f"{node.url}/v1/tables/ticks/keys/{symbol}", timeout=10)
        assert tick.status_code == 200, tick.text
        assert tick.json()["symbol"] == symbol

        # The word endpoint's producer, then Spark's source and sink, then the node.
        written = httpx.post(f"{node.url}/v1/words", json={"text": " ".join(WORDS)}, timeout=10)
        assert written.status_code == 202, written.text

        def counted() -> bool:
            resp = httpx.get(f"{node.url}/v1/words/kafka", timeout=10)
            return resp.status_code == 200 and resp.json()["count"] == 3

        if not until(counted, 420):
            tail = pipeline.log_file.read_text(errors="replace")[-4000:]
            pytest.fail(f"no count of 3 for 'kafka' after 420s; the driver's log ends:\n{tail}")
        assert httpx.get(f"{node.url}/v1/words/spark", timeout=10).json()["count"] == 2
        log = pipeline.log_file.read_text()
        assert "Traceback" not in log, log[log.find("Traceback") :][:2000]
        assert sasl_broker.password_file.read_text().strip() not in log
        assert sasl_broker.password_file.read_text().strip() not in node.log_file.read_text()
    finally:
        pipeline.stop()
        node.stop()


def test_wrong_credentials_stop_a_node_and_a_feed_with_a_clear_error(
    sasl_broker: LocalBroker, tmp_path: Path
):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    env = {
        "KIQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KIQ_KAFKA_SASL_USERNAME": sasl_broker.settings.sasl_username,
        "KIQ_KAFKA_SASL_PASSWORD_FILE": str(wrong),
    }
    bootstrap = sasl_broker.bootstrap
    served = kiq(
        "serve",
        "--bootstrap",
        bootstrap,
        "--port",
        "1",
        "--data-dir",
        str(tmp_path / "n"),
        "--table",
        "t=ticks",
        env=env,
    )
    feed = kiq(
        "feed", "stocks", "--bootstrap", bootstrap, "--topic", "ticks", "--duration", "1", env=env
    )
    for done in (served, feed):
        assert done.returncode == 1, done.stdout + done.stderr
        message = " ".join(done.stderr.split())
        assert f"Kafka at {bootstrap} refused kiq's credentials" in message, done.stderr
        assert "sasl_password_file" in message
        assert "Traceback" not in done.stderr
        assert "not-the-password" not in done.stdout + done.stderr

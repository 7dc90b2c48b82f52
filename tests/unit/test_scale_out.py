"""The local cluster helpers' layout and the replication kiq asks of a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiq.kafka.admin import replication_for
from kiq.pipelines.session import spark_conf
from kiq.runtime.broker import LocalBroker, started_brokers
from kiq.runtime.spark_cluster import LocalSparkCluster, spark_home
from kiq.settings import BrokerSettings, SparkClusterSettings, SparkSettings


@pytest.mark.parametrize(
    ("brokers", "factor", "config"),
    [
        (1, 1, {}),
        (2, 2, {}),
        (3, 3, {"min.insync.replicas": "2"}),
        (5, 3, {"min.insync.replicas": "2"}),
        (0, 1, {}),
    ],
)
def test_replication_follows_the_brokers(brokers: int, factor: int, config: dict):
    assert replication_for(brokers) == (factor, config)


def test_one_broker_keeps_its_layout(tmp_path: Path):
    settings = BrokerSettings(port=9092, data_dir=tmp_path / "d", log_dir=tmp_path / "l")
    broker = LocalBroker(settings)
    assert broker.bootstrap == "127.0.0.1:9092"
    (node,) = broker.nodes
    assert (node.port, node.controller_port) == (9092, 9093)
    assert node.properties == (tmp_path / "d" / "server.properties").resolve()
    node.write_config(settings, voters=None)
    props = node.properties.read_text()
    assert "controller.quorum.bootstrap.servers=127.0.0.1:9093\n" in props
    assert "offsets.topic.replication.factor=1\n" in props
    assert started_brokers(tmp_path / "d") == 1


def test_three_brokers_form_one_quorum(tmp_path: Path):
    settings = BrokerSettings(port=9092, brokers=3, data_dir=tmp_path / "d", log_dir=tmp_path / "l")
    assert settings.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    broker = LocalBroker(settings)
    assert broker.bootstrap == settings.bootstrap
    assert [(n.node_id, n.port, n.controller_port) for n in broker.nodes] == [
        (1, 9092, 9095),
        (2, 9093, 9096),
        (3, 9094, 9097),
    ]
    voters = "1@127.0.0.1:9095,2@127.0.0.1:9096,3@127.0.0.1:9097"
    for node in broker.nodes:
        node.write_config(settings, voters)
    props = broker.nodes[1].properties.read_text()
    assert broker.nodes[1].properties.parent == (tmp_path / "d" / "node-2").resolve()
    assert f"controller.quorum.voters={voters}\n" in props
    assert "node.id=2\n" in props and "controller.quorum.bootstrap" not in props
    assert "offsets.topic.replication.factor=3\n" in props
    assert "transaction.state.log.min.isr=2\n" in props
    assert started_brokers(tmp_path / "d") == 3
    assert started_brokers(tmp_path / "elsewhere") == 0


def test_free_ports_for_three_brokers_are_all_distinct(tmp_path: Path):
    broker = LocalBroker.on_free_ports(tmp_path, brokers=3)
    ports = [p for n in broker.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert broker.bootstrap == ",".join(f"127.0.0.1:{n.port}" for n in broker.nodes)


def test_a_loopback_standalone_master_keeps_the_driver_on_loopback(tmp_path: Path):
    here = spark_conf(SparkSettings(master="spark://127.0.0.1:7077"), [])
    assert here["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.sql.shuffle.partitions" not in here  # not a local master: Spark's own
    elsewhere = spark_conf(SparkSettings(master="spark://10.0.0.5:7077"), [])
    assert "spark.driver.host" not in elsewhere


def test_standalone_cluster_settings(tmp_path: Path):
    settings = SparkClusterSettings(port=7100, data_dir=tmp_path)
    assert settings.master_url == "spark://127.0.0.1:7100"
    assert settings.effective_ui_port == 7101
    cluster = LocalSparkCluster(settings)
    assert cluster.ui_url == "http://127.0.0.1:7101"
    status = cluster.status()  # nothing started: stopped, not an error
    assert not status.ready and status.master_pid is None and status.cores == 0
    assert (spark_home() / "bin" / "spark-class").is_file()


def test_checkpoints_on_a_shared_store_keep_their_uri(tmp_path: Path):
    shared = SparkSettings(master="spark://10.0.0.5:7077", checkpoint_dir="s3a://bucket/kiq/")
    conf = spark_conf(shared, [])
    assert conf["spark.sql.streaming.checkpointLocation"] == "s3a://bucket/kiq"
    # the rename(2) manager is for a local disk; a store keeps Spark's own
    assert "spark.sql.streaming.checkpointFileManagerClass" not in conf
    local = SparkSettings(checkpoint_dir=tmp_path / "cp")
    assert local.checkpoint_root == str((tmp_path / "cp").resolve())
    assert "spark.sql.streaming.checkpointFileManagerClass" in spark_conf(local, [])


def test_spark_and_broker_commands_speak_through_the_settings(tmp_path: Path):
    from typer.testing import CliRunner

    from kiq.cli.main import app

    runner = CliRunner()
    stopped = runner.invoke(app, ["spark", "status", "--port", "1", "--data-dir", str(tmp_path)])
    assert stopped.exit_code == 1 and "stopped" in stopped.output
    bad = runner.invoke(app, ["spark", "start", "--worker-cores", "0"])
    assert bad.exit_code == 1 and "KIQ_SPARK_CLUSTER_WORKER_CORES" in bad.output
    too_many = runner.invoke(app, ["broker", "start", "--brokers", "10"])
    assert too_many.exit_code == 1 and "[broker] brokers" in too_many.output
    # stop finds the three brokers start laid out, without being told how many
    settings = BrokerSettings(port=1, brokers=3, data_dir=tmp_path / "d", log_dir=tmp_path / "l")
    for node in LocalBroker(settings).nodes:
        node.write_config(settings, voters="1@127.0.0.1:4")
    status = runner.invoke(
        app, ["broker", "status", "--port", "1", "--data-dir", str(tmp_path / "d")]
    )
    assert status.exit_code == 1 and "pids=-,-,-" in status.output

from __future__ import annotations

import socket
import zipfile
from pathlib import Path

import pytest

from kiq.errors import SetupError
from kiq.pipelines.session import CHECKPOINT_FILE_MANAGER, ROCKSDB_PROVIDER, spark_conf
from kiq.runtime.jars import SPARK_CONNECTOR_VERSION, kafka_broker_classpath, spark_connector_jars
from kiq.runtime.ports import free_ports
from kiq.settings import SparkSettings


def test_missing_broker_jars_say_which_make_target(tmp_path: Path):
    with pytest.raises(SetupError, match=r"make jars.*KIQ_BROKER_JARS_DIR"):
        kafka_broker_classpath(tmp_path)
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "kafka_2.13-4.1.1.jar").touch()
    assert kafka_broker_classpath(tmp_path) == f"{tmp_path / 'kafka'}/*"


def test_connector_must_be_the_pinned_version(tmp_path: Path):
    spark = tmp_path / "spark"
    spark.mkdir()
    (spark / "spark-sql-kafka-0-10_2.13-4.1.0.jar").touch()
    (spark / "kafka-clients-3.9.2.jar").touch()
    with pytest.raises(
        SetupError,
        match=r"connector 4\.2\.0.*found spark-sql-kafka-0-10_2\.13-4\.1\.0.*KIQ_SPARK_JARS_DIR",
    ):
        spark_connector_jars(tmp_path)
    (spark / "spark-sql-kafka-0-10_2.13-4.2.0.jar").touch()
    names = [p.name for p in spark_connector_jars(tmp_path)]
    assert "spark-sql-kafka-0-10_2.13-4.2.0.jar" in names and "kafka-clients-3.9.2.jar" in names


def test_spark_conf_for_local_and_remote_masters(tmp_path: Path):
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    local = spark_conf(SparkSettings(checkpoint_dir=tmp_path / "cp", shuffle_partitions=6), jars)
    assert local["spark.jars"] == f"{jars[0]},{jars[1]}"
    assert local["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert local["spark.sql.streaming.checkpointLocation"] == str((tmp_path / "cp").resolve())
    assert local["spark.sql.shuffle.partitions"] == "6"
    assert local["spark.sql.streaming.checkpointFileManagerClass"] == CHECKPOINT_FILE_MANAGER
    assert local["spark.driver.bindAddress"] == "127.0.0.1"

    remote = spark_conf(
        SparkSettings(master="spark://h:7077", conf={"spark.executor.memory": "2g"}),
        jars,
    )
    assert "spark.driver.bindAddress" not in remote
    assert "spark.sql.shuffle.partitions" not in remote
    assert remote["spark.executor.memory"] == "2g"
    default_local = spark_conf(SparkSettings(checkpoint_dir=tmp_path / "cp"), jars)
    assert default_local["spark.sql.shuffle.partitions"] == "1"


def test_the_checkpoint_file_manager_is_in_the_installed_spark():
    """Its package moved between Spark versions: an upgrade must not lose it quietly."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    (sql_jar,) = jars.glob("spark-sql_2.13-*.jar")
    with zipfile.ZipFile(sql_jar) as jar:
        assert CHECKPOINT_FILE_MANAGER.replace(".", "/") + ".class" in jar.namelist()


def test_free_ports_are_distinct():
    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(p > 0 for p in ports)


def test_free_ports_lie_below_the_range_outgoing_connections_take_theirs_from():
    """An outgoing connection's source port cannot take a port chosen there before its
    listener binds it (a node of ``kiq up`` once failed that way)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(20)
    assert all(10_000 <= p < low for p in ports), ports
    base, after = free_ports(2, consecutive=True)
    assert after == base + 1 < low
    for port in (base, after):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free, not held


def test_without_the_kernels_range_the_os_picks(monkeypatch, tmp_path):
    from kiq.runtime import ports

    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", tmp_path / "absent")
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(p >= low for p in free_ports(3))
    base, after = free_ports(2, consecutive=True)
    assert after == base + 1


def test_port_taken_sees_listeners_and_connections_but_not_time_wait():
    from kiq.runtime.ports import port_taken

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port_taken("127.0.0.1", port)
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
    assert port_taken("127.0.0.1", client.getsockname()[1])  # a source port is held too
    accepted.close()  # the server's side closes first: its port goes to TIME_WAIT
    client.close()
    assert not port_taken("127.0.0.1", port)


def test_cluster_ids_never_look_like_options():
    from kiq.runtime.broker import _cluster_id

    ids = {_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_cpu_seconds_grows_with_work_and_is_none_for_unknown_pids():
    import os

    from kiq.bench.stats import cpu_seconds

    before = cpu_seconds([os.getpid()])
    sum(i * i for i in range(3_000_000))
    after = cpu_seconds([os.getpid()])
    assert before is not None and after is not None and after > before
    assert cpu_seconds([None]) is None


def test_forwarded_cost_is_solved_from_the_mix():
    from kiq.bench.lookups import _forwarding_figures

    # 3 nodes: 1/3 local at 40 us, 2/3 forwarded at 100 us -> 80 us a request on average;
    # local lookups spread over the nodes cost 50 us, so forwarded at 95 us against them.
    local = {"rps": 20_000.0, "cpu_us": 40.0, "spread_rps": 15_000.0, "spread_cpu_us": 50.0}
    forward = {"forward_rps": 9_000.0, "forward_errors": 0, "forward_cpu_us": 92.0}
    forward |= {"forward_asker_cpu_us": 70.0, "forward_owner_cpu_us": 22.0}
    got = _forwarding_figures({**local, **forward, "spread_errors": 0}, 8_000.0, 80.0, 3)
    assert got == {
        "local_rps": 20_000.0,
        "vs_local": 0.4,
        "local_cpu_us_per_request": 40.0,
        "spread_local_rps": 15_000.0,
        "spread_local_cpu_us_per_request": 50.0,
        "spread_local_errors": 0,
        "forwarded_cost_vs_local": 2.5,
        "forwarded_cost_vs_spread_local": 1.9,
        "forward_only_rps": 9_000.0,
        "forward_only_errors": 0,
        "forward_only_asker_cpu_us_per_request": 70.0,
        "forward_only_owner_cpu_us_per_request": 22.0,
        "forward_only_cpu_us_per_request": 92.0,
        "forward_only_cost_vs_local": 2.3,
    }
    assert _forwarding_figures({}, 8_000.0, 80.0, 3) == {}


def test_connector_pin_agrees_with_the_pom():
    """The pom fetches the connector the code looks for: one pin, written twice."""
    pom = Path(__file__).parents[2] / "jvm" / "spark-connector" / "pom.xml"
    text = pom.read_text()
    assert f"<spark.version>{SPARK_CONNECTOR_VERSION}</spark.version>" in text
    assert f"<token-provider.version>{SPARK_CONNECTOR_VERSION}</token-provider.version>" in text

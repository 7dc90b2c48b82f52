"""kiq's pipelines inside Spark applications that are not kiq's: a script run by
``spark-submit`` against a standalone master, and a plain ``pyspark`` session in local mode
as a notebook has. Each builds its own SparkSession and calls ``kiq.pipelines``; the
pipeline is the pipelines guide's example, whose run by `kiq pipeline run` is checked
against the same reference in test_user_pipeline.py. `kiq serve` nodes given no table
list (they learn the tables from the catalog) must answer every customer's totals and a
range of orders exactly as that reference says. A SIGTERM to ``spark-submit`` stops the
queries gracefully: each query's last progress record says ``stopped``, and the Python
driver ends with the JVM. A session without Spark's Kafka connector gets one message
naming the setting to add.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiq.catalog import PROGRESS_TOPIC
from kiq.kafka import compacted, create_topics, topic_partitions
from kiq.progress import decode_progress
from kiq.runtime import processes
from kiq.runtime.java import java_executable
from kiq.runtime.spark_cluster import LocalSparkCluster, spark_home
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster
from tests.integration.test_user_pipeline import (
    BAD,
    PARTITIONS,
    guide_example,
    make_orders,
    reference,
    served,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

KIQ = Path(sys.executable).parent / "kiq"
QUERIES = {"customer-totals", "orders-by-time"}

# A user's own driver script: kiq imported as a library, nothing else of kiq's.
SUBMITTED = """\
import logging
import sys
from pathlib import Path

from pyspark.sql import SparkSession

import kiq.pipelines

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
spark = SparkSession.builder.appName("orders-job").getOrCreate()
pipeline, bootstrap, checkpoints, returned = sys.argv[1:5]
kiq.pipelines.run(spark, pipeline, bootstrap=bootstrap, checkpoint_dir=checkpoints)
Path(returned).write_text("run returned")  # the JVM may be gone, and its stdout with it
"""

# What a notebook does: a local session of its own, the pipeline function defined in it,
# `start` that returns, a later `stop`, and the session still usable afterwards.
NOTEBOOK = """\
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

import kiq.pipelines

bootstrap, checkpoints, stop_file, example = sys.argv[1:5]
spark = (
    SparkSession.builder.master("local[2]")
    .config(map=kiq.pipelines.session_conf())
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
exec(compile(Path(example).read_text(), example, "exec"))  # a cell defining build(ctx)
pipelines = kiq.pipelines.start(spark, build, bootstrap=bootstrap, checkpoint_dir=checkpoints)
print("notebook: started", sorted(q.name for q in pipelines), pipelines.active, flush=True)
while not Path(stop_file).exists():
    time.sleep(0.2)
pipelines.stop()
print("notebook: stopped", pipelines.active, spark.range(5).count(), flush=True)
spark.stop()
"""

NO_CONNECTOR = """\
import sys

from pyspark.sql import SparkSession

import kiq.pipelines
from kiq.errors import KiqError

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    kiq.pipelines.start(spark, sys.argv[1], bootstrap=sys.argv[2], checkpoint_dir=sys.argv[3])
except KiqError as exc:
    print("refused:", exc, flush=True)
else:
    print("started without the connector", flush=True)
spark.stop()
"""


def _env() -> dict[str, str]:
    java = java_executable()
    return {
        "JAVA_HOME": str(java.parent.parent),
        "SPARK_HOME": str(spark_home()),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def _send_orders(bootstrap: str, orders: list[dict]) -> tuple[dict, list]:
    """The first ``orders`` (with bad ones among them); the reference of all of them."""
    create_topics(bootstrap, {"orders": PARTITIONS})
    half = len(orders) // 2
    produce(bootstrap, "orders", [(o["customer"], json.dumps(o)) for o in orders[:half]])
    produce(bootstrap, "orders", [(k, v) for k, v, _ in BAD])
    produce(bootstrap, "orders", [(o["customer"], json.dumps(o)) for o in orders[half:]])
    return reference(orders)


def _wait_topic(bootstrap: str, topic: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 240
    while topic_partitions(bootstrap, topic) != PARTITIONS:
        assert proc.poll() is None, f"the driver ended:\n{processes.log_tail([log], 60)}"
        assert time.monotonic() < deadline, f"no {topic}:\n{processes.log_tail([log], 60)}"
        time.sleep(1)


def _serve_from_the_catalog(
    cluster: Cluster, driver: subprocess.Popen[bytes], log: Path, want: tuple[dict, list]
) -> None:
    """Once the driver made the tables' topics, two nodes given no table list serve them."""
    _wait_topic(cluster.bootstrap, "orders-by-time", driver, log)
    for i in (1, 2):
        cluster.add(f"n{i}")
    cluster.wait_ready()
    _served_exactly(cluster, want)


def _served_exactly(cluster: Cluster, want: tuple[dict, list]) -> None:
    """Every node answers the reference: totals key by key, the range item by item."""
    deadline = time.monotonic() + 240
    while True:
        answers = [served(url) for url in cluster.live_urls()]
        got = [(t, [(i["key"], i["value"]) for i in r]) for t, r in answers]
        if all(g == want for g in got) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert len(got) == 2
    for totals, items in got:
        for customer, value in want[0].items():
            assert totals.get(customer) == value, customer
        assert totals == want[0]
        assert items == want[1]


def _running(needle: str) -> list[int]:
    """The processes whose command line holds ``needle``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _progress_states(bootstrap: str) -> dict[str, str]:
    records = compacted.read_latest(bootstrap, PROGRESS_TOPIC, timeout_s=10)
    return {p.query: p.state for p in decode_progress(records, app="kiq")}


def _wait_states(bootstrap: str, state: str, timeout_s: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        states = _progress_states(bootstrap)
        if (
            set(states) == QUERIES and set(states.values()) == {state}
        ) or time.monotonic() > deadline:
            return states
        time.sleep(1)


def test_a_spark_submitted_script_runs_the_pipeline_and_stops_on_sigterm(
    own_bootstrap: str, tmp_path: Path
):
    bootstrap = own_bootstrap
    orders = make_orders(random.Random(42), 1200)
    want = _send_orders(bootstrap, orders[:900])
    example = tmp_path / "orders_pipeline.py"
    example.write_text(guide_example())
    script = tmp_path / "job.py"
    script.write_text(SUBMITTED)
    printed = subprocess.run(
        [str(KIQ), "setup", "--spark-conf"], capture_output=True, text=True, timeout=120
    )
    assert printed.returncode == 0, printed.stderr
    conf = [a for line in printed.stdout.splitlines() for a in shlex.split(line)]
    assert conf[0] == "--conf" and any(a.startswith("spark.jars=") for a in conf)

    standalone = LocalSparkCluster.on_free_ports(tmp_path / "spark", cores=2, memory="1g")
    standalone.start()
    master = standalone.status().master_url
    log = tmp_path / "submit.log"
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        *_driver_flags(master),
        "--deploy-mode",
        "client",
        *conf,
        str(script),
        f"{example}:build",
        bootstrap,
        str(tmp_path / "checkpoints"),
        str(tmp_path / "returned"),
    ]
    job = processes.spawn(cmd, log_file=log, env=_env(), cwd=tmp_path, new_session=True)
    resumed: subprocess.Popen[bytes] | None = None
    cluster = Cluster(bootstrap, tmp_path, [])
    try:
        _serve_from_the_catalog(cluster, job, log, want)
        assert _wait_states(bootstrap, "running") == dict.fromkeys(QUERIES, "running")

        # spark-submit is the JVM: the signal reaches it alone, as a scheduler sends it.
        os.kill(job.pid, signal.SIGTERM)
        job.wait(90)
        text = log.read_text()
        assert "the JVM is shutting down: stopping pipeline=orders_pipeline.build" in text
        assert "pipeline stopped name=orders_pipeline.build" in text
        assert "Traceback" not in text, processes.log_tail([log], 80)
        deadline = time.monotonic() + 20
        while _running(str(script)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _running(str(script)), "the Python driver outlived the job"
        assert (tmp_path / "returned").read_text() == "run returned"
        assert _wait_states(bootstrap, "stopped") == dict.fromkeys(QUERIES, "stopped")
        # the tables stay served, and the checkpoints are where the script said
        _served_exactly(cluster, want)
        assert (tmp_path / "checkpoints" / "orders_pipeline.build" / "customer-totals").is_dir()
        executors = list((tmp_path / "spark" / "work").glob("app-*/*/stderr"))
        assert executors, "no executor ran on the worker"

        # The same pipeline as a packaged job (`kiq pipeline package`): it resumes from the
        # checkpoints the script left, and the orders sent meanwhile are counted once.
        commits = tmp_path / "checkpoints" / "orders_pipeline.build" / "customer-totals" / "commits"
        before = {p.name for p in commits.iterdir()}
        produce(bootstrap, "orders", [(o["customer"], json.dumps(o)) for o in orders[900:]])
        resumed = _submit_package(tmp_path, example, bootstrap, master)
        _served_exactly(cluster, reference(orders))
        after = {p.name for p in commits.iterdir()}
        assert before < after  # one checkpoint, carried on
        os.kill(resumed.pid, signal.SIGTERM)
        resumed.wait(90)
        assert "pipeline stopped name=orders_pipeline.build" in (tmp_path / "job.log").read_text()
    finally:
        processes.stop(job, grace_s=20, group=True)
        if resumed is not None:
            processes.stop(resumed, grace_s=20, group=True)
        cluster.shutdown()
        standalone.stop()


def _driver_flags(master: str) -> list[str]:
    """spark-submit's flags for a small driver on this machine's loopback, two state
    partitions (the worker's two cores)."""
    conf = (
        "spark.sql.shuffle.partitions=2",
        "spark.driver.host=127.0.0.1",
        "spark.ui.enabled=false",
    )
    flags = [f for c in conf for f in ("--conf", c)]
    return ["--master", master, "--driver-memory", "512m", *flags]


def _submit_package(
    tmp_path: Path, example: Path, bootstrap: str, master: str
) -> subprocess.Popen[bytes]:
    """`kiq pipeline package` of an application running ``example``, submitted."""
    home = tmp_path / "app"
    home.mkdir()
    (home / example.name).write_text(example.read_text())
    (home / "app.toml").write_text(
        f'[app]\npipelines = ["{example.name}:build"]\n'
        f'[pipeline]\nbootstrap = "{bootstrap}"\n'
        f'[spark]\ncheckpoint_dir = "{tmp_path / "checkpoints"}"\n'
    )
    out = tmp_path / "job"
    packaged = subprocess.run(
        [str(KIQ), "pipeline", "package", str(home / "app.toml"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert packaged.returncode == 0, packaged.stdout + packaged.stderr
    submit = [str(out / "submit.sh"), *_driver_flags(master)]
    env = {**_env(), "SPARK_SUBMIT": str(spark_home() / "bin" / "spark-submit")}
    return processes.spawn(
        submit, log_file=tmp_path / "job.log", env=env, cwd=tmp_path, new_session=True
    )


def test_a_notebook_session_starts_and_stops_the_pipeline(own_bootstrap: str, tmp_path: Path):
    bootstrap = own_bootstrap
    want = _send_orders(bootstrap, make_orders(random.Random(7), 900))
    example = tmp_path / "cell.py"
    example.write_text(guide_example())
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    stop_file = tmp_path / "stop"
    log = tmp_path / "notebook.log"
    argv = [
        sys.executable,
        str(script),
        bootstrap,
        str(tmp_path / "cp"),
        str(stop_file),
        str(example),
    ]
    notebook = processes.spawn(argv, log_file=log, env=_env(), cwd=tmp_path, new_session=True)
    cluster = Cluster(bootstrap, tmp_path, [])
    try:
        _serve_from_the_catalog(cluster, notebook, log, want)
        text = log.read_text()
        assert "notebook: started ['customer-totals', 'orders-by-time'] True" in text
        assert _wait_states(bootstrap, "running") == dict.fromkeys(QUERIES, "running")
        stop_file.touch()
        assert notebook.wait(90) == 0, processes.log_tail([log], 60)
        assert "notebook: stopped False 5" in log.read_text()  # the session outlived them
        assert _wait_states(bootstrap, "stopped") == dict.fromkeys(QUERIES, "stopped")
        # a function given itself checkpoints as its file's target would: notebook.build
        assert (tmp_path / "cp" / "notebook.build" / "customer-totals").is_dir()
    finally:
        processes.stop(notebook, grace_s=20, group=True)
        cluster.shutdown()


def test_a_session_without_the_connector_is_told_which_setting_to_add(tmp_path: Path):
    example = tmp_path / "orders_pipeline.py"
    example.write_text(guide_example())
    script = tmp_path / "bare.py"
    script.write_text(NO_CONNECTOR)
    done = subprocess.run(
        [sys.executable, str(script), f"{example}:build", "127.0.0.1:1", str(tmp_path / "cp")],
        capture_output=True,
        text=True,
        env={**os.environ, **_env()},
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    assert len(refused) == 1, done.stdout
    message = refused[0]
    assert "spark-sql-kafka-0-10" in message and "spark.jars" in message
    assert "kiq setup --spark-conf" in message and "spark.jars.packages=" in message
    for noise in ("Py4J", "at org.apache", "Traceback"):
        assert noise not in done.stdout + done.stderr
    assert not (tmp_path / "cp" / "orders_pipeline.build").exists()  # nothing started

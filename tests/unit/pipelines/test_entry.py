"""``kiq.pipelines.start``/``run`` on a session kiq did not build: what they are given
(functions, targets, settings in their order), what they check on the session, and how
started pipelines stop (``Pipelines``, the JVM's shutdown hook). The integration test
``tests/integration/test_pipelines_in_any_spark.py`` runs them on real Spark."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

import kiq.pipelines
from kiq.errors import ConfigError, SetupError
from kiq.pipelines import entry, running
from kiq.pipelines.jvm_hook import JvmStopHook
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.running import Pipelines
from kiq.pipelines.session import ROCKSDB_PROVIDER
from kiq.runtime.jars import CONNECTOR_PACKAGE, PARTITIONER_CLASS
from kiq.runtime.pipeline_errors import PipelineFailed
from kiq.settings import SparkSettings


def build(ctx: object) -> None:
    """A pipeline function of this module's."""


# -- what the pipelines are ----------------------------------------------------------------


def test_a_function_is_named_as_its_file_target_would_be() -> None:
    (target,) = entry._targets(build, [])
    assert target.function is build
    assert target.name == "tests.unit.pipelines.test_entry.build"

    def notebook_cell(ctx: object) -> None: ...

    notebook_cell.__module__ = "__main__"  # defined in a notebook or the submitted script
    (main,) = entry._targets([notebook_cell], [])
    import __main__

    stem = Path(getattr(__main__, "__file__", "") or "").stem
    assert main.name == (f"{stem}.notebook_cell" if stem else "notebook_cell")


def test_targets_are_resolved_and_checked(tmp_path: Path) -> None:
    file = tmp_path / "orders.py"
    file.write_text("def build(ctx):\n    pass\n")
    targets = entry._targets([f"{file}:build", build], [])
    assert [t.name for t in targets] == ["orders.build", "tests.unit.pipelines.test_entry.build"]
    assert [t.name for t in entry._targets(None, [f"{file}:build"])] == ["orders.build"]
    with pytest.raises(ConfigError, match=r"\[app\] pipelines"):
        entry._targets(None, [])
    with pytest.raises(ConfigError, match="one name"):
        entry._targets([build, build], [])
    with pytest.raises(ConfigError, match="exactly one argument"):
        entry._targets(lambda: None, [])
    with pytest.raises(ConfigError, match="has no function"):
        entry._targets(f"{file}:missing", [])


# -- settings: arguments, then the environment, then the file -------------------------------


class _Conf:
    def __init__(self, given: dict[str, str]) -> None:
        self.given = given

    def contains(self, key: str) -> bool:
        return key in self.given

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.given.get(key, default)


class _RuntimeConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {"spark.sql.shuffle.partitions": "200"}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str) -> str:
        return self.values[key]


class _Jvm:
    def __init__(self, loadable: set[str]) -> None:
        self.loadable = loadable
        outer = self

        class _Utils:
            @staticmethod
            def classIsLoadable(name: str) -> bool:
                return name in outer.loadable

        self.org = type("org", (), {})()
        self.org.apache = type("apache", (), {})()
        self.org.apache.spark = type("spark", (), {})()
        self.org.apache.spark.util = type("util", (), {})()
        self.org.apache.spark.util.Utils = _Utils


class _Context:
    def __init__(self, master: str, loadable: set[str], given: dict[str, str]) -> None:
        self.master = master
        self._jvm: Any = _Jvm(loadable)
        self._conf = _Conf(given)

    def getConf(self) -> _Conf:
        return self._conf


class _Session:
    def __init__(
        self, master: str = "local[2]", loadable: set[str] | None = None, **given: str
    ) -> None:
        everything = {*entry.CONNECTOR_CLASSES, PARTITIONER_CLASS}
        self.sparkContext = _Context(master, everything if loadable is None else loadable, given)
        self.conf = _RuntimeConf()


def test_arguments_override_the_environment_which_overrides_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "app.toml"
    config.write_text(
        '[app]\nname = "shop"\n[pipeline]\nbootstrap = "file:1"\ninterval = "3 seconds"\n'
        '[spark]\ncheckpoint_dir = "ck"\n[serve]\ntables = ["totals=shop-totals"]\n'
    )
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    plan = entry._plan(_Session(), build, {"config": config})  # type: ignore[arg-type]
    assert plan.opts.bootstrap == "file:1" and plan.opts.interval == "3 seconds"
    assert plan.opts.checkpoint_root == str((tmp_path / "ck").resolve())  # beside the file
    assert (plan.app, plan.topics) == ("shop", {"totals": "shop-totals"})
    assert plan.spark.master == "local[2]"  # the session's, not a setting
    assert plan.opts.input_tasks == 1  # one input task per batch on a local master

    monkeypatch.setenv("KIQ_PIPELINE_BOOTSTRAP", "env:2")
    plan = entry._plan(_Session(), build, {"config": config})  # type: ignore[arg-type]
    assert plan.opts.bootstrap == "env:2"
    given = {"config": str(config), "bootstrap": "arg:3", "app": "other", "checkpoint_dir": "/x"}
    plan = entry._plan(_Session("spark://h:7077"), build, given)  # type: ignore[arg-type]
    assert (plan.opts.bootstrap, plan.app, plan.opts.checkpoint_root) == ("arg:3", "other", "/x")
    assert plan.opts.input_tasks is None  # a cluster: one task per Kafka partition
    with pytest.raises(ConfigError, match="version"):
        entry._plan(_Session(), build, {"config": config, "version": "v2/x"})  # type: ignore[arg-type]


def test_session_conf_is_what_a_session_needs_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    config = tmp_path / "app.toml"
    config.write_text('[spark]\nconf = { "spark.executor.cores" = "2" }\nshuffle_partitions = 4\n')
    conf = kiq.pipelines.session_conf(config)
    assert "spark-sql-kafka-0-10_2.13" in conf["spark.jars"]
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.executor.cores"] == "2"
    packaged = kiq.pipelines.session_conf(config, packages=True)
    assert packaged["spark.jars.packages"] == CONNECTOR_PACKAGE
    assert "spark-sql-kafka" not in packaged.get("spark.jars", "")


# -- the session ---------------------------------------------------------------------------


def test_a_session_without_the_connector_is_refused_with_the_setting_to_add() -> None:
    session = _Session(loadable={"org.apache.kafka.clients.producer.KafkaProducer"})
    with pytest.raises(SetupError) as refused:
        entry.check_session(session, SparkSettings())  # type: ignore[arg-type]
    message = str(refused.value)
    assert "spark-sql-kafka-0-10" in message and "commons-pool2" in message
    assert "kafka-clients" not in message  # it is there
    assert "spark.jars" in message and CONNECTOR_PACKAGE in message
    assert "kiq setup --spark-conf" in message
    assert session.conf.values == {"spark.sql.shuffle.partitions": "200"}  # nothing changed


def test_sql_settings_are_set_where_the_owner_left_them(caplog: pytest.LogCaptureFixture) -> None:
    session = _Session(**{"spark.sql.session.timeZone": "Europe/Paris"})
    with caplog.at_level(logging.WARNING, logger=entry.__name__):
        jar = entry.check_session(session, SparkSettings())  # type: ignore[arg-type]
    assert session.conf.values["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert "spark.sql.session.timeZone" not in session.conf.values  # the owner's choice
    assert any("200" in r.getMessage() for r in caplog.records)  # said, not changed
    assert jar is not None and jar.name == "kiq-partitioner.jar"

    given = _Session(**{"spark.jars": "/j/a.jar,/opt/kiq-partitioner.jar"})
    assert entry.check_session(given, SparkSettings()) == Path("/opt/kiq-partitioner.jar")  # type: ignore[arg-type]
    without = _Session(loadable=set(entry.CONNECTOR_CLASSES))
    assert entry.check_session(without, SparkSettings()) is None  # type: ignore[arg-type]


def test_a_session_without_a_jvm_is_refused() -> None:
    class Connect:  # what a Spark Connect session looks like from here: no SparkContext
        pass

    with pytest.raises(ConfigError, match="Spark Connect"):
        kiq.pipelines.start(Connect(), build, bootstrap="b:1")  # type: ignore[arg-type]


# -- started pipelines ---------------------------------------------------------------------


class _Query:
    def __init__(self, name: str) -> None:
        self.name = name
        self.id = name
        self.isActive = True
        self.recentProgress: list[Any] = []
        self.error: Exception | None = None

    def stop(self) -> None:
        self.isActive = False

    def exception(self) -> Exception | None:
        return self.error


class _Publisher:
    closed: ClassVar[list[dict[str, tuple[str, str]]]] = []

    def __init__(self, *_: Any, **__: Any) -> None: ...

    def maybe_publish(self) -> None: ...

    def close(self, states: dict[str, tuple[str, str]]) -> None:
        _Publisher.closed.append(dict(states))


def _pipelines(monkeypatch: pytest.MonkeyPatch, *names: str) -> Pipelines:
    monkeypatch.setattr(running, "ProgressPublisher", _Publisher)
    monkeypatch.setattr(running, "WATCH_EVERY_S", 0.05)
    monkeypatch.setattr(running, "quiet_interrupted_batches", lambda _spark: None)
    monkeypatch.setattr(running, "wait_for_tasks", lambda _spark: None)
    _Publisher.closed = []
    owned = [("p", "microbatch", _Query(n)) for n in names]
    opts = StreamOptions(bootstrap="b:1", checkpoint_root="/ck")
    return Pipelines(object(), "p", opts, app="a", owned=owned, checkpoints={})  # type: ignore[arg-type]


def test_started_pipelines_stop_gracefully_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    pipelines = _pipelines(monkeypatch, "q1", "q2")
    pipelines.watch_in_background()
    assert pipelines.active and len(pipelines) == 2 and pipelines[0].name == "q1"
    assert pipelines.wait(0.2) is False
    pipelines.stop()
    assert not pipelines.active and pipelines.wait(0) is True
    assert all(not q.isActive for q in pipelines)
    assert _Publisher.closed == [{"q1": ("stopped", ""), "q2": ("stopped", "")}]
    pipelines.stop()  # again: nothing more
    assert len(_Publisher.closed) == 1


def test_a_failed_query_stops_the_others_and_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    pipelines = _pipelines(monkeypatch, "q1", "q2")
    pipelines.watch_in_background()
    failed = pipelines[1]
    failed.error = RuntimeError("[KAFKA] broker went away\nat somewhere")
    failed.isActive = False
    with pytest.raises(PipelineFailed, match="broker went away"):
        pipelines.wait(5)
    assert not pipelines[0].isActive
    assert _Publisher.closed == [
        {"q1": ("stopped", ""), "q2": ("failed", "[KAFKA] broker went away")}
    ]


def test_the_jvm_hook_stops_the_pipelines_and_returns_once_they_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipelines = _pipelines(monkeypatch, "q1")
    hook = JvmStopHook("p", pipelines.stopping, pipelines.wait, wait_s=5)
    watcher = threading.Thread(target=pipelines.watch)
    watcher.start()
    started = time.monotonic()
    hook.run()  # what the JVM calls at its shutdown, in a thread of py4j's
    assert not pipelines.active and not pipelines[0].isActive
    assert time.monotonic() - started < 5
    watcher.join(5)
    hook.remove()  # after the call: waits for it to have left, removes nothing
    assert hook.toString() == "kiq-pipelines-stop[p]" and hook.equals(hook)
    assert JvmStopHook("p", threading.Event(), time.sleep).install(object()) is False  # type: ignore[arg-type]

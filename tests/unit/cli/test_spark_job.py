"""What a Spark application of the user's own is given: `kiq setup --spark-conf` (the
settings, ready for spark-submit) and `kiq pipeline package` (a job spark-submit runs)."""

from __future__ import annotations

import os
import py_compile
import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.pipelines.session import ROCKSDB_PROVIDER
from kiq.runtime.jars import CONNECTOR_PACKAGE

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KIQ_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def _conf(lines: str) -> dict[str, str]:
    """``--conf K=V`` lines as a shell would split them, into a dict."""
    words = shlex.split(lines)
    assert words[::2] == ["--conf"] * (len(words) // 2), words
    return dict(w.split("=", 1) for w in words[1::2])


def test_spark_conf_prints_the_settings_one_flag_a_line(tmp_path: Path) -> None:
    config = tmp_path / "kiq.toml"
    config.write_text('[spark]\nconf = { "spark.app.note" = "two words" }\n')
    done = runner.invoke(app, ["--config", str(config), "setup", "--spark-conf"])
    assert done.exit_code == 0, done.output
    lines = done.output.strip().splitlines()
    assert all(line.startswith("--conf ") for line in lines)
    assert "--conf 'spark.app.note=two words'" in lines  # quoted where a shell needs it
    conf = _conf(done.output)
    jars = conf["spark.jars"].split(",")
    assert any(Path(j).name == "spark-sql-kafka-0-10_2.13-4.2.0.jar" for j in jars)
    assert all(Path(j).is_absolute() and Path(j).is_file() for j in jars)
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.session.timeZone"] == "UTC"

    packaged = _conf(runner.invoke(app, ["setup", "--spark-conf", "--packages"]).output)
    assert packaged["spark.jars.packages"] == CONNECTOR_PACKAGE
    assert "spark-sql-kafka" not in packaged.get("spark.jars", "")


def test_spark_conf_says_what_is_missing(tmp_path: Path) -> None:
    done = runner.invoke(app, ["setup", "--spark-conf", "--jars-dir", str(tmp_path / "none")])
    assert done.exit_code == 1
    assert "Kafka connector" in done.output and "kiq setup --jars-dir" in done.output
    alone = runner.invoke(app, ["setup", "--packages"])
    assert alone.exit_code == 2 and "--spark-conf" in alone.output


def _app(tmp_path: Path) -> Path:
    home = tmp_path / "shop"
    (home / "pipes").mkdir(parents=True)
    (home / "pipes" / "orders.py").write_text("def build(ctx):\n    pass\n")
    config = home / "app.toml"
    config.write_text(
        '[app]\nname = "shop"\npipelines = ["pipes/orders.py:build", "stocks"]\n'
        "[spark]\nshuffle_partitions = 3\n"
    )
    return config


def test_package_writes_a_job_spark_submit_runs(tmp_path: Path) -> None:
    config = _app(tmp_path)
    done = runner.invoke(app, ["pipeline", "package", str(config)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "dist" / "spark-job-shop"
    assert "packaged application shop" in done.output and "submit.sh" in done.output
    assert (out / "app.toml").read_text() == config.read_text()
    assert (out / "pipes" / "orders.py").read_text() == "def build(ctx):\n    pass\n"
    jars = sorted(p.name for p in (out / "jars").iterdir())
    assert "spark-sql-kafka-0-10_2.13-4.2.0.jar" in jars and "kafka-clients-3.9.2.jar" in jars
    defaults = (out / "spark-defaults.conf").read_text()
    assert f"spark.sql.streaming.stateStore.providerClass {ROCKSDB_PROVIDER}\n" in defaults
    assert "spark.sql.shuffle.partitions 3\n" in defaults and "spark.jars" not in defaults
    with zipfile.ZipFile(out / "kiq.zip") as archive:
        names = set(archive.namelist())
    assert {"kiq/__init__.py", "kiq/pipelines/entry.py"} <= names
    assert not any("__pycache__" in n for n in names)
    py_compile.compile(str(out / "job.py"), doraise=True)
    assert "kiq.pipelines.run(spark, None" in (out / "job.py").read_text()

    # submit.sh hands spark-submit everything, and the flags it is given, in this order
    fake = tmp_path / "spark-submit"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    moved = tmp_path / "elsewhere"
    out.rename(moved)  # the job finds its files wherever it is
    argv = subprocess.run(
        [str(moved / "submit.sh"), "--master", "spark://h:7077"],
        capture_output=True,
        text=True,
        env={**os.environ, "SPARK_SUBMIT": str(fake)},
        check=True,
    ).stdout.splitlines()
    assert argv[:2] == ["--properties-file", str(moved / "spark-defaults.conf")]
    assert argv[2] == "--jars"
    assert sorted(Path(j).name for j in argv[3].split(",")) == jars
    assert argv[4:] == [
        "--py-files",
        str(moved / "kiq.zip"),
        "--master",
        "spark://h:7077",
        str(moved / "job.py"),
    ]


def test_package_refuses_what_it_cannot_ship(tmp_path: Path) -> None:
    config = _app(tmp_path)
    out = tmp_path / "job"
    assert (
        runner.invoke(app, ["pipeline", "package", str(config), "--out", str(out)]).exit_code == 0
    )
    again = runner.invoke(app, ["pipeline", "package", str(config), "--out", str(out)])
    assert again.exit_code == 1 and "--force" in again.output
    forced = ["pipeline", "package", str(config), "--out", str(out), "--force"]
    assert runner.invoke(app, forced).exit_code == 0

    inside = ["pipeline", "package", str(config), "--out", str(config.parent.parent), "--force"]
    refused = runner.invoke(app, inside)
    assert refused.exit_code == 1 and "holds the application" in " ".join(refused.output.split())
    assert config.is_file() and (config.parent / "pipes" / "orders.py").is_file()

    (tmp_path / "outside.py").write_text("def build(ctx):\n    pass\n")
    config.write_text('[app]\npipelines = ["../outside.py:build"]\n')
    outside = runner.invoke(app, ["pipeline", "package", str(config), "--out", str(tmp_path / "o")])
    assert outside.exit_code == 1 and "outside" in outside.output and "move it" in outside.output
    config.write_text('[app]\nname = "bare"\n')
    empty = runner.invoke(app, ["pipeline", "package", str(config), "--out", str(tmp_path / "e")])
    assert empty.exit_code == 1 and "[app] pipelines" in empty.output

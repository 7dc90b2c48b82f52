"""`kiq pipeline package`: an application's pipelines as a job ``spark-submit`` runs, with no
kiq command on the way.

The directory it writes holds all the job needs beside a Python with kiq installed: the
application file (``app.toml``) and its pipeline files at the same paths relative to it,
Spark's Kafka connector and kiq's partitioner (``jars/``), kiq's SQL settings as a
properties file, kiq itself zipped for ``--py-files`` (executors then import it where a
UDF does), a driver script (``job.py``: its own SparkSession, then
``kiq.pipelines.run``), and ``submit.sh``, which calls spark-submit with all of them and
the flags it is given (``--master``...).
"""

from __future__ import annotations

import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kiq import settings
from kiq.errors import ConfigError
from kiq.pipelines.session import needed_conf
from kiq.targets import is_file

JOB = '''"""The pipelines of application {app}, as a Spark job (written by `kiq pipeline package`).

Submit it with ./submit.sh [spark-submit flags], e.g. ./submit.sh --master spark://HOST:7077,
or spark-submit --properties-file spark-defaults.conf --jars JARS --py-files kiq.zip job.py.
The driver's Python needs kiq installed (pip install kiq); it stops gracefully on SIGTERM.
"""

import logging
from pathlib import Path

from pyspark.sql import SparkSession

import kiq.pipelines

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
spark = SparkSession.builder.appName("kiq-{app}").getOrCreate()
kiq.pipelines.run(spark, None, config=Path(__file__).resolve().parent / "app.toml")
'''

SUBMIT = """#!/bin/sh
# spark-submit the pipelines of application {app} (written by `kiq pipeline package`).
# Flags given are passed on, e.g.: ./submit.sh --master spark://HOST:7077
set -eu
here=$(cd "$(dirname "$0")" && pwd)
jars=$(for jar in "$here"/jars/*.jar; do printf '%s,' "$jar"; done)
exec "${{SPARK_SUBMIT:-spark-submit}}" --properties-file "$here/spark-defaults.conf" \\
  --jars "${{jars%,}}" --py-files "$here/kiq.zip" "$@" "$here/job.py"
"""


@dataclass(frozen=True)
class Package:
    """What ``build_package`` wrote."""

    directory: Path
    app: str
    pipelines: tuple[str, ...]
    jars: tuple[Path, ...]

    @property
    def submit(self) -> Path:
        return self.directory / "submit.sh"


def default_directory(config: Path) -> Path:
    """``dist/spark-job-APP`` beside where the command runs."""
    return Path("dist") / f"spark-job-{settings.load(settings.AppSettings, config).name}"


def build_package(config: Path, out: Path, *, force: bool = False) -> Package:
    """Write the job for the application file ``config`` into ``out``."""
    app = settings.load(settings.AppSettings, config)
    if not app.pipelines:
        raise ConfigError(
            f'{config} lists no pipelines: add [app] pipelines = ["file.py:build"] to package'
        )
    home = config.resolve().parent
    targets = _raw_pipelines(config)
    files = [_pipeline_file(target, home) for target in targets]
    jars = _jars(config)
    if home.is_relative_to(out.resolve()):
        raise ConfigError(
            f"{out} holds the application ({config}): choose an --out outside it, which "
            "--force would empty"
        )
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ConfigError(f"{out} is not empty: choose another --out, or --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, out / "app.toml")
    for file in files:
        if file is not None:
            where = out / file.relative_to(home)
            where.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, where)
    (out / "jars").mkdir()
    for jar in jars:
        shutil.copyfile(jar, out / "jars" / jar.name)
    conf = needed_conf(settings.load(settings.SparkSettings, config))
    conf.pop("spark.jars", None)
    (out / "spark-defaults.conf").write_text(
        "# kiq's Spark settings for this job (`kiq pipeline package`); the jars are --jars\n"
        + "".join(f"{key} {value}\n" for key, value in conf.items())
    )
    _zip_kiq(out / "kiq.zip")
    (out / "job.py").write_text(JOB.format(app=app.name))
    submit = out / "submit.sh"
    submit.write_text(SUBMIT.format(app=app.name))
    submit.chmod(submit.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return Package(out, app.name, tuple(targets), tuple(out / "jars" / j.name for j in jars))


def _raw_pipelines(config: Path) -> list[str]:
    """``[app] pipelines`` as written (the settings make file targets absolute)."""
    found = settings.load_toml(config).get("app", {}).get("pipelines", [])
    return [str(t) for t in found] if isinstance(found, list) else []


def _pipeline_file(target: str, home: Path) -> Path | None:
    """A file target's file, which must be in the application's directory; None for a
    module or a pipeline kiq ships (the driver imports those)."""
    where = target.rpartition(":")[0]
    if not where or not is_file(where):
        return None
    path = (home / where).resolve()
    if not path.is_file():
        raise ConfigError(f"pipeline {target}: {path} does not exist")
    if not path.is_relative_to(home):
        raise ConfigError(
            f"pipeline {target}: {path} is outside {home}, the application file's directory: "
            "move it there, so the package keeps its path relative to app.toml"
        )
    return path


def _jars(config: Path) -> list[Path]:
    found = needed_conf(settings.load(settings.SparkSettings, config))
    return [Path(j) for j in found.get("spark.jars", "").split(",") if j]


def _zip_kiq(to: Path) -> None:
    """The installed kiq package, data files included, for ``--py-files``."""
    root = Path(__file__).resolve().parents[1]  # the kiq package this module is part of
    with zipfile.ZipFile(to, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("kiq") / path.relative_to(root))

"""The JVM jar cache: where kiq looks its jars up, and the one door that fills it.

Layout under the jars dir: ``kafka/`` holds the broker and its runtime dependencies;
``spark/`` holds Spark's Kafka connector and the three jars the pyspark wheel lacks, at
``SPARK_CONNECTOR_VERSION`` (not pyspark's: see below); ``kiq/`` holds kiq's own Kafka
partitioner, compiled from the Java source the package ships. The two jar sets are pinned,
with their checksums, in the manifest ``jar_fetch`` reads; `kiq setup` (and `make jars`,
which runs it on the checkout's cache) fetches and builds them (``ensure_jars``).

The settings find the cache (``kiq.settings.find_jar_cache``): a kiq checkout's
``.cache/jars``, else the per-user cache. The lookups below fetch what is missing first
when the jars dir is the per-user cache, so the first command that needs the jars (`kiq
broker start`, `kiq pipeline run`, `kiq up`, `kiq demo`) fetches them; a checkout's cache
and a jars dir set by hand are left as they are, with an error that says how to fill them.
"""

from __future__ import annotations

import fcntl
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rich.console import Console

from kiq.errors import SetupError
from kiq.runtime import jar_fetch, partitioner_build
from kiq.settings import is_checkout_jar_cache, user_jar_cache

# The Java source in jvm/partitioner: composite keys to their first part's partition, and the
# producer setting (one per topic) that names a topic's key separator.
PARTITIONER_CLASS = "io.kiq.kafka.KeyPrefixPartitioner"
SEPARATOR_OPTION = "kiq.key.separator."
# The connector version jvm/spark-connector/pom.xml pins. Maven Central has no Spark 4.3
# artifacts yet; the 4.2.0 connector runs on the pyspark 4.3.0 runtime for what kiq does,
# which tests/integration/test_spark_compat.py checks on every run.
SPARK_CONNECTOR_VERSION = "4.2.0"
# The same connector as Maven coordinates, for ``spark.jars.packages`` (Spark fetches it and
# its dependencies itself, from Maven Central or the repositories the session names).
CONNECTOR_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_CONNECTOR_VERSION}"

KAFKA, SPARK, PARTITIONER = "kafka", "spark", "kiq"
ALL_SETS = (KAFKA, SPARK, PARTITIONER)
# The partitioner compiles against the API the connector ships: the spark set's kafka-clients.
_COMPILE_AGAINST = "kafka-clients"


def _fix(section: str, jars_dir: Path) -> str:
    setting = f"set [{section}] jars_dir (KIQ_{section.upper()}_JARS_DIR) to a jar cache"
    if is_checkout_jar_cache(jars_dir):
        return f"run `make jars` (or `make setup`) in the kiq checkout, or {setting}"
    return f"run `kiq setup --jars-dir {jars_dir}` (in a kiq checkout: `make jars`), or {setting}"


def kafka_broker_classpath(jars_dir: Path) -> str:
    """A java ``-cp`` value with every broker jar."""
    _fetch_if_missing(jars_dir, KAFKA)
    kafka = jars_dir / KAFKA
    if not any(kafka.glob("kafka_2.13-*.jar")):
        raise SetupError(f"the Kafka broker jars are not in {kafka}: {_fix('broker', jars_dir)}")
    return str(kafka / "*")


def spark_connector_jars(
    jars_dir: Path, spark_version: str = SPARK_CONNECTOR_VERSION
) -> list[Path]:
    """The jars to hand Spark as ``spark.jars`` for the Kafka source and sink."""
    _fetch_if_missing(jars_dir, SPARK)
    spark = jars_dir / SPARK
    connector = spark / f"spark-sql-kafka-0-10_2.13-{spark_version}.jar"
    if not connector.exists():
        found = sorted(p.name for p in spark.glob("spark-sql-kafka-*.jar"))
        detail = f" (found {', '.join(found)})" if found else ""
        raise SetupError(
            f"Spark's Kafka connector {spark_version} is not in {spark}{detail}: "
            + _fix("spark", jars_dir)
        )
    return sorted(spark.glob("*.jar"))


def partitioner_jar(jars_dir: Path) -> Path | None:
    """kiq's composite-key partitioner, if it is built (only composite keys need it)."""
    if partitioner_build.find_javac() is not None:  # without one, nothing to try: go on
        _fetch_if_missing(jars_dir, PARTITIONER)
    jar = jars_dir / PARTITIONER / partitioner_build.JAR_NAME
    return jar if jar.is_file() else None


# -- filling the cache ---------------------------------------------------------------------


@dataclass(frozen=True)
class SetStatus:
    """One set of the jar cache, as `kiq setup` reports it."""

    name: str
    directory: Path
    description: str
    ready: bool
    detail: str


def check_jars(
    jars_dir: Path, sets: Collection[str] = ALL_SETS, verify: bool = True
) -> list[SetStatus]:
    """What ``jars_dir`` holds of ``sets``, changing nothing (by checksum with ``verify``)."""
    manifest = jar_fetch.load_manifest()
    found = []
    for name in sets:
        if name == PARTITIONER:
            found.append(_partitioner_status(jars_dir / name))
            continue
        jar_set = manifest[name]
        check = jar_fetch.check_set(jars_dir / name, jar_set, verify=verify)
        problems = [
            f"{len(check.missing)} of {len(jar_set.jars)} missing" if check.missing else "",
            f"wrong size or checksum: {', '.join(j.file_name for j in check.wrong)}"
            if check.wrong
            else "",
            f"not in the set: {', '.join(p.name for p in check.stale)}" if check.stale else "",
        ]
        if check.complete:
            found.append(_complete(jars_dir, jar_set, "verified" if verify else "present"))
        else:
            detail = "; ".join(p for p in problems if p)
            found.append(SetStatus(name, jars_dir / name, jar_set.description, False, detail))
    return found


def _complete(jars_dir: Path, jar_set: jar_fetch.JarSet, how: str) -> SetStatus:
    detail = f"{len(jar_set.jars)} jars, {how}"
    return SetStatus(jar_set.name, jars_dir / jar_set.name, jar_set.description, True, detail)


def _partitioner_status(directory: Path) -> SetStatus:
    jar = directory / partitioner_build.JAR_NAME
    what = "kiq's composite-key partitioner, built from the shipped source"
    if not jar.is_file():
        detail = "not built" + ("" if partitioner_build.find_javac() else " (no javac)")
        return SetStatus(PARTITIONER, directory, what, False, detail)
    if not partitioner_build.is_current(jar):
        return SetStatus(PARTITIONER, directory, what, False, f"{jar.name} from other sources")
    return SetStatus(PARTITIONER, directory, what, True, f"{jar.name}, current")


def ensure_jars(
    jars_dir: Path,
    sets: Collection[str] = ALL_SETS,
    repository: str | None = None,
    console: Console | None = None,
    bar: bool = True,
) -> list[SetStatus]:
    """Fetch and build what ``jars_dir`` lacks of ``sets``; then what it holds.

    Jars already there are verified, not fetched again; ``console`` says what is fetched,
    with a progress bar if ``bar``. The partitioner is built only when ``javac`` is there:
    without it, ``console`` says so and the rest goes on.
    """
    console = console or Console(stderr=True)
    manifest = jar_fetch.load_manifest()
    url = jar_fetch.repository_url(repository)
    jars_dir.mkdir(parents=True, exist_ok=True)
    found = []
    with _locked(jars_dir):  # another kiq fetching into the same cache waits for this one
        for name in sets:
            if name != PARTITIONER:
                before = jar_fetch.fetch_set(jars_dir / name, manifest[name], url, console, bar)
                fetched = len(before.missing) + len(before.wrong)
                state = f"verified ({fetched} fetched)" if fetched else "verified"
                found.append(_complete(jars_dir, manifest[name], state))
        if PARTITIONER in sets:
            _build_partitioner(jars_dir, url, console, bar)
            found.append(_partitioner_status(jars_dir / PARTITIONER))
    return found


def _build_partitioner(jars_dir: Path, repository: str, console: Console, bar: bool) -> None:
    jar = jars_dir / PARTITIONER / partitioner_build.JAR_NAME
    if partitioner_build.is_current(jar):
        return
    javac = partitioner_build.find_javac()
    if javac is None:
        jar_fetch.say(console, f"note: {partitioner_build.NO_JAVAC}")
        return
    spark = jar_fetch.load_manifest()[SPARK]
    (clients,) = (j for j in spark.jars if j.artifact == _COMPILE_AGAINST)
    if not _quick_complete(jars_dir, SPARK):
        jar_fetch.fetch_set(jars_dir / SPARK, spark, repository, console, bar)
    jar_fetch.say(console, f"building kiq's partitioner into {jar} (javac)")
    partitioner_build.build(jar, jars_dir / SPARK / clients.file_name, javac)


def _quick_complete(jars_dir: Path, name: str) -> bool:
    """Whether a set's jars are all there, and no others, by their sizes."""
    jar_set = jar_fetch.load_manifest()[name]
    return jar_fetch.check_set(jars_dir / name, jar_set, verify=False).complete


@contextmanager
def _locked(jars_dir: Path) -> Iterator[None]:
    with (jars_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# -- on demand -------------------------------------------------------------------------------


def _is_user_cache(jars_dir: Path) -> bool:
    return jars_dir.absolute() == user_jar_cache().absolute()


def _fetch_if_missing(jars_dir: Path, needed: str) -> None:
    """The one door: in the per-user cache, fetch every set when ``needed`` is incomplete."""
    if not _is_user_cache(jars_dir):
        return
    if needed == PARTITIONER:
        if partitioner_build.is_current(jars_dir / PARTITIONER / partitioner_build.JAR_NAME):
            return
    elif _quick_complete(jars_dir, needed):
        return
    _ensure_once(jars_dir)


@cache
def _ensure_once(jars_dir: Path) -> None:
    """At most once a process: a fetch that left something out is not tried again at once."""
    console = Console(stderr=True)
    jar_fetch.say(
        console,
        f"kiq's JVM jars are not all in {jars_dir}: fetching them first (`kiq setup` does it "
        "ahead of time)",
    )
    # No bar: the command's own spinner may be on the screen (`kiq up` starting the broker).
    ensure_jars(jars_dir, console=console, bar=False)

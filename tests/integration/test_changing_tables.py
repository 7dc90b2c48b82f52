"""A changed key: refused at start, then the table started over by `kiq topics reset` (issue 38).

A pipeline keeps word counts keyed by ``word``; its next version keys them by ``word`` and
``lang``. On the shared broker and Spark session, as `kiq pipeline run` builds them:

- the changed pipeline is refused when it declares the table, with the message naming the
  table, the key's change and both ways out; nothing is written (no query, the catalog and
  the topic as they were);
- `kiq topics reset TABLE --yes` deletes the topic, the query's checkpoint, the declaration,
  and the stores a stopped `kiq up` node left under ``[app] home``, and says so;
- the changed pipeline then starts, and the topic holds only keys of the new shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError
from kiq.kafka import compacted, delete_topics, topic_partitions
from kiq.runtime.ports import free_port
from kiq.settings import SparkSettings
from kiq.tables.declared import decode_catalog
from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark

WORDS = [("a", "en"), ("b", "en"), ("a", "fr"), ("c", "de"), ("a", "en")]
SCHEMA = "word STRING NOT NULL, lang STRING NOT NULL"


def _context(spark: Any, spark_settings: SparkSettings, bootstrap: str, root: Path, app: str):
    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions
    from kiq.runtime.jars import partitioner_jar

    # As `kiq pipeline run` makes it: the run's checkpoints under ROOT/RUN.
    opts = StreamOptions(bootstrap=bootstrap, checkpoint_root=f"{root}/p", trigger="microbatch")
    jar = partitioner_jar(spark_settings.jars_dir)
    assert jar is not None, "kiq setup (make jars) builds the partitioner"
    return Context(spark, opts, "p", partitioner_jar=jar, app=app)


@pytest.mark.slow  # about 30 s: three streaming queries' first batches
def test_a_changed_key_is_refused_and_a_reset_starts_the_table_over(
    spark: Any, spark_settings: SparkSettings, bootstrap: str, make_topic: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    app, table = f"chg-{tag}", f"chg-counts-{tag}"
    source = make_topic("chg-words", partitions=2)
    produce(bootstrap, source, [(w, json.dumps({"word": w, "lang": g})) for w, g in WORDS])
    root, home = tmp_path / "checkpoints", tmp_path / "home"
    try:
        ctx = _context(spark, spark_settings, bootstrap, root, app)
        words = ctx.read(source, SCHEMA)
        query = ctx.write_table(table, words.groupBy("word").count(), key="word")
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert (root / "p" / table).is_dir()
        before = compacted.read_latest(bootstrap, CATALOG_TOPIC)
        assert decode_catalog(before, app)[table].key == ("word",)

        changed = _context(spark, spark_settings, bootstrap, root, app)
        words = changed.read(source, SCHEMA)
        with pytest.raises(ConfigError) as refused:
            changed.write_table(table, words.groupBy("word", "lang").count(), key=("word", "lang"))
        message = str(refused.value)
        assert message.startswith(f"table {table} (application {app}) changed incompatibly")
        assert "key: word → word|lang" in message
        assert "kiq pipeline run --version v2" in message
        assert f"kiq topics reset {table} (" in message
        assert changed.queries == []
        after = compacted.read_latest(bootstrap, CATALOG_TOPIC)
        assert (
            after[decode_catalog(before, app)[table].catalog_key]
            == before[decode_catalog(before, app)[table].catalog_key]
        )

        # A stopped `kiq up` node's stores of the table, under [app] home.
        stores = home / "n1" / "tables" / table / "0"
        stores.mkdir(parents=True)
        (stores / "CURRENT").write_text("old\n")
        config = tmp_path / "kiq.toml"
        config.write_text(f'[app]\nname = "{app}"\nhome = "{home}"\nport = {free_port()}\n')
        command = ["topics", "reset", table, "--yes", "--bootstrap", bootstrap]
        command += ["--checkpoint", str(root), "--config", str(config)]
        reset = subprocess.run(
            [sys.executable, "-m", "kiq", *command], capture_output=True, text=True, timeout=120
        )
        out = reset.stdout + reset.stderr
        assert reset.returncode == 0, out
        assert f"deleted topic {table}" in out
        assert f"deleted checkpoint {root / 'p' / table}" in out
        assert f"removed the declaration of {table}" in out
        assert f"deleted the stores of {table} in {home / 'n1'}" in out
        assert topic_partitions(bootstrap, table) is None
        assert not (root / "p" / table).exists()
        assert (root / "p").is_dir(), "only the query's own checkpoint goes"
        assert table not in decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC), app)
        assert not (home / "n1" / "tables" / table).exists()
        assert (home / "n1" / "tables").is_dir()

        again = _context(spark, spark_settings, bootstrap, root, app)
        words = again.read(source, SCHEMA)
        query = again.write_table(
            table, words.groupBy("word", "lang").count(), key=("word", "lang")
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        written = {r.key.decode(): json.loads(r.value) for r in drain(bootstrap, table, 4)}
        assert written == {
            "a|en": {"word": "a", "lang": "en", "count": 2},
            "b|en": {"word": "b", "lang": "en", "count": 1},
            "a|fr": {"word": "a", "lang": "fr", "count": 1},
            "c|de": {"word": "c", "lang": "de", "count": 1},
        }
        declared = decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC), app)[table]
        assert declared.key == ("word", "lang")
    finally:
        records = compacted.read_latest(bootstrap, CATALOG_TOPIC)
        mine = [k for k in records if k.startswith(f"table:{app}/")]
        compacted.put(bootstrap, CATALOG_TOPIC, dict.fromkeys(mine))
        delete_topics(
            bootstrap, [t for t in (table, f"{source}-dlq") if topic_partitions(bootstrap, t)]
        )


def test_a_reset_refuses_while_the_pipeline_runs(bootstrap: str, tmp_path: Path) -> None:
    """A running query's progress (published seconds ago) stops the reset; nothing changes."""
    import time

    from kiq.catalog import PROGRESS_TOPIC
    from kiq.progress import QueryProgress
    from kiq.tables.declared import Declared

    tag = uuid.uuid4().hex[:8]
    app, table = f"run-{tag}", f"run-counts-{tag}"
    declared = Declared(table=table, topic=table, key=("k",), app=app, pipeline="p", query=table)
    running = QueryProgress(
        app=app, pipeline="p", query=table, published_ms=int(time.time() * 1000)
    )
    compacted.ensure(bootstrap, CATALOG_TOPIC)
    compacted.ensure(bootstrap, PROGRESS_TOPIC)
    compacted.put(bootstrap, CATALOG_TOPIC, {declared.catalog_key: declared.encode()})
    compacted.put(bootstrap, PROGRESS_TOPIC, {running.key: running.encode()})
    config = tmp_path / "kiq.toml"
    config.write_text(f'[app]\nname = "{app}"\nhome = "{tmp_path / "home"}"\n')
    try:
        command = ["topics", "reset", table, "--yes", "--bootstrap", bootstrap, "-c", str(config)]
        reset = subprocess.run(
            [sys.executable, "-m", "kiq", *command], capture_output=True, text=True, timeout=120
        )
        out = " ".join((reset.stdout + reset.stderr).split())
        assert reset.returncode == 1, out
        assert f"pipeline p is running (query {table})" in out
        assert "stop it first" in out
        assert table in decode_catalog(compacted.read_latest(bootstrap, CATALOG_TOPIC), app)
    finally:
        compacted.put(bootstrap, CATALOG_TOPIC, {declared.catalog_key: None})
        compacted.put(bootstrap, PROGRESS_TOPIC, {running.key: None})

"""`kiq retire` of a forged declaration against a real broker and a real node (issue 37, 2).

The table catalog holds, for one application, table ``evil`` v1 (serving) and a v2 whose
declaration names another application's live topic (a name that even ends as kiq derives
v2's) and a checkpoint directory outside the checkpoint root. A routine `kiq retire evil v2`
drops v2 everywhere, deletes v2's own dead letters, and leaves the other application's
topic and the directory alone, naming both in its output.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.kafka import compacted, create_topics, delete_topics, topic_partitions
from kiq.tables.declared import Declared
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster

pytestmark = pytest.mark.slow


def test_retire_of_a_forged_declaration_keeps_the_live_topic_and_the_directory(
    bootstrap: str, tmp_path: Path
):
    tag = uuid.uuid4().hex[:8]
    app, other_app = f"fence-{tag}", f"other-{tag}"
    evil, live = f"evil-{tag}", f"live-{tag}.v2"  # the other app's v2 table's topic
    letters = f"evil-{tag}-dlq.v2"
    root, precious = tmp_path / "checkpoints", tmp_path / "operator" / "work"
    (root / "p@v2").mkdir(parents=True)
    (precious / "notes").mkdir(parents=True)
    create_topics(bootstrap, {evil: 2, live: 2, letters: 1})
    produce(bootstrap, live, [("k", '{"n": 1}')])

    def declared(**fields: object) -> Declared:
        return Declared(key=("k",), pipeline="p", query="q", **fields)  # type: ignore[arg-type]

    records = [
        declared(table="live", topic=live, app=other_app, version="v2"),
        declared(table="evil", topic=evil, app=app),
        declared(
            table="evil",
            topic=live,
            app=app,
            version="v2",
            checkpoint=str(precious),
            dead_letters=(letters,),
        ),
    ]
    compacted.ensure(bootstrap, CATALOG_TOPIC)
    compacted.ensure(bootstrap, PROGRESS_TOPIC)  # as a pipeline leaves it: retire writes there
    compacted.put(bootstrap, CATALOG_TOPIC, {d.catalog_key: d.encode() for d in records})
    cluster = Cluster(bootstrap, tmp_path, [], env={"KIQ_APP_NAME": app})
    try:
        node = cluster.add("n1")
        node.wait_ready(90)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            versions = httpx.get(f"{node.url}/v1/tables/evil/versions", timeout=10)
            if versions.status_code == 200 and len(versions.json()["versions"]) == 2:
                break
            time.sleep(0.5)
        assert [v["version"] for v in versions.json()["versions"]] == ["v1", "v2"]

        command = ["retire", "evil", "v2", "--url", node.url, "--checkpoint", str(root)]
        retired = subprocess.run(
            [sys.executable, "-m", "kiq", *command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = " ".join((retired.stdout + retired.stderr).split())
        assert retired.returncode == 0, out
        assert topic_partitions(bootstrap, live) == 2, "the other application's topic is there"
        assert f"kept topic {live}: the declaration table:{other_app}/live@v2 names it" in out
        assert topic_partitions(bootstrap, letters) is None, "v2's own dead letters are gone"
        assert f"deleted topic {letters}" in out
        assert (precious / "notes").is_dir(), "the operator's directory is there"
        assert f"checkpoint {precious} kept" in out
        assert (root / "p@v2").is_dir(), "the root's own p@v2 was not what the record named"
        after = httpx.get(f"{node.url}/v1/tables/evil/versions", timeout=10).json()
        assert [v["version"] for v in after["versions"]] == ["v1"]
    finally:
        cluster.shutdown()
        compacted.put(bootstrap, CATALOG_TOPIC, {d.catalog_key: None for d in records})
        delete_topics(bootstrap, [evil, live, letters])

"""A rolling upgrade from the last release to the current code, and back, under reads.

Three nodes of the release ``releases.toml`` names first (its tree taken from git, run by
this interpreter: the same dependencies) serve a 12-partition table with a cluster secret.
A reader load goes through the nodes a load balancer would keep in rotation. Each node in
turn leaves the rotation, stops, starts on the current code, is waited for (ready, every
replica it holds serving) and rejoins; then each is rolled back the same way. Every read
must answer, and while versions are mixed a read sent to a node of one version for a
partition another node of the other version is active for is answered by that node: a
forward between versions, both ways; the hellos agreed on each pair's wire version.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import uuid
from io import BytesIO
from pathlib import Path

import httpx
import pytest

import kiq
from kiq.bench.chaos_nodes import Rotation
from kiq.bench.cluster import actives, wait_applied, wait_settled
from kiq.bench.reader import ReaderLoad
from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce
from tests.integration.test_serving import end_offsets

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CURRENT_SRC = Path(kiq.__file__).resolve().parents[1]
PARTITIONS = 12
KEYS = [f"R{i:04d}" for i in range(600)]
TABLE = "t"


def release_tree(into: Path) -> tuple[str, Path]:
    """The last release's version and its ``src``, extracted from git into ``into``."""
    release = tomllib.loads((ROOT / "releases.toml").read_text())["release"][0]
    commit = release["commit"]
    if shutil.which("git") is None:
        pytest.fail(f"git is needed to build release {release['version']} ({commit})")
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(
            f"release {release['version']}'s commit {commit} is not in this clone (a shallow "
            f"clone? fetch the full history): {done.stderr.decode(errors='replace').strip()}"
        )
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    return release["version"], into / "src"


def _serving(nodes: list[LocalNode], timeout_s: float = 60) -> None:
    """Until the nodes agree and every replica each holds serves (its standbys too:
    readiness covers what a node owns, and the next node to stop may be a partition's
    only other replica)."""
    wait_settled(nodes, timeout_s)
    deadline = time.monotonic() + timeout_s
    waiting = ["?"]
    while time.monotonic() < deadline:
        waiting = [
            f"{n.node_id}:{p['partition']}"
            for n in nodes
            for p in n.metadata()["tables"][TABLE]["partitions"]
            if n.node_id in (p["active"], *p["standbys"])
            and (p["local"] is None or p["local"]["state"] not in ("active", "standby"))
        ]
        if not waiting:
            return
        time.sleep(0.1)
    raise AssertionError(f"replicas not serving after {timeout_s:.0f}s: {waiting[:5]}")


def _forwards(
    nodes: list[LocalNode], version: dict[str, str], partition_of: dict[str, int]
) -> set[tuple[str, str]]:
    """(asked node's version, answering node's version) of reads sent to each node for
    partitions another node of the other version is active for, answered by that node."""
    seen: set[tuple[str, str]] = set()
    owners = actives(nodes[0], TABLE)
    with httpx.Client(timeout=5) as client:
        for asked in nodes:
            for key, partition in partition_of.items():
                owner = owners.get(partition)
                if owner is None or version[owner] == version[asked.node_id]:
                    continue
                resp = client.get(f"{asked.url}/v1/tables/{TABLE}/keys/{key}")
                assert resp.status_code == 200, (asked.node_id, key, resp.text)
                if resp.headers.get("x-kiq-served-by") == owner:
                    seen.add((version[asked.node_id], version[owner]))
                    break
    return seen


def test_rolling_upgrade_and_rollback_fail_no_read(bootstrap: str, make_topic, tmp_path: Path):
    released, old_src = release_tree(tmp_path / "release")
    probe = subprocess.run(
        [sys.executable, "-c", "import kiq; print(kiq.__file__)"],
        env={"PYTHONPATH": str(old_src)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(probe.stdout.strip()).is_relative_to(old_src), probe.stdout  # the release's code
    topic = make_topic("rolling", partitions=PARTITIONS)
    partition_of = produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS])
    secret = tmp_path / "cluster.secret"
    secret.write_text(secrets.token_hex(32))
    trees = {released: old_src, "current": CURRENT_SRC}
    version = dict.fromkeys(("n1", "n2", "n3"), released)
    nodes = [
        LocalNode(
            node_id,
            bootstrap,
            [f"{TABLE}={topic}"],
            tmp_path / node_id,
            tmp_path / f"{node_id}.log",
            extra_args=[
                *("--cluster", f"kiq-rolling-{uuid.uuid4().hex[:8]}"),
                *("--cluster-secret-file", str(secret)),
            ],
            env={"PYTHONPATH": str(old_src)},
            endpoints=(),
        )
        for node_id in version
    ]
    for node in nodes[1:]:
        node.extra_args = nodes[0].extra_args
    try:
        for node in nodes:
            node.start()
        _serving(nodes, 90)
        wait_applied(nodes, TABLE, end_offsets(bootstrap, topic, PARTITIONS), timeout_s=60)
        rotation = Rotation(nodes)
        mixed: set[tuple[str, str]] = set()
        with ReaderLoad(rotation, TABLE, KEYS, rate=300, concurrency=16) as load:
            time.sleep(1)
            for to in ("current", released):
                for node in nodes:
                    rotation.without(node)
                    node.stop()
                    node.env = {"PYTHONPATH": str(trees[to])}
                    version[node.node_id] = to
                    node.start()
                    _serving(nodes)
                    rotation.adding(node)
                    if len(set(version.values())) > 1:
                        mixed |= _forwards(nodes, version, partition_of)
            time.sleep(1)
        stats = load.stats
    finally:
        for node in nodes:
            node.stop()
    assert stats.failures == [], stats.failures[:5]
    assert stats.ok > 1_000, stats.summary()
    assert mixed == {(released, "current"), ("current", released)}, mixed
    # The current code's hellos agreed on the release's wire with its nodes, on its own with
    # each other's (kiq.formats.WIRE).
    said = "".join(n.log_file.read_text(errors="replace") for n in nodes)
    assert "peer wire agreed" in said and "version=1" in said and "version=2" in said


_READ_BY_RELEASE = """
import sys, msgspec
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.markers import batch_of
from kiq.progress import QueryProgress
from kiq.tables import checks
from kiq.tables.declared import Declared
from kiq.tables.versions import Alias
declared, alias, progress, marker = msgspec.json.decode(sys.stdin.buffer.read(), type=list[bytes])
d = checks.decode(CATALOG_TOPIC, "table:stocks/quotes@v2", declared, Declared)
a = checks.decode(CATALOG_TOPIC, "alias:stocks/quotes", alias, Alias)
p = checks.decode(PROGRESS_TOPIC, "stocks/stocks/quotes", progress, QueryProgress)
print(d.topic, d.rank_by, a.version, p.batch, batch_of(marker))
"""


def test_the_release_reads_what_the_current_code_writes(tmp_path: Path):
    """The catalog and progress records now carry ``format_version``, a field the release's
    decoders skip; its markers a header it never reads: the release reads them as before."""
    import msgspec

    from kiq.markers import marker_value
    from kiq.progress import QueryProgress
    from kiq.tables.declared import Declared
    from kiq.tables.versions import Alias

    released, old_src = release_tree(tmp_path / "release")
    release = ROOT / "tests" / "golden" / released
    declared = msgspec.json.decode((release / "catalog-table.json").read_bytes(), type=Declared)
    progress = msgspec.json.decode((release / "progress.json").read_bytes(), type=QueryProgress)
    alias = Alias(table="quotes", version="v2", app="stocks")
    records = [declared.encode(), alias.encode(), progress.encode(), marker_value(42)]
    assert all(b'"format_version":1' in r for r in records[:3])  # what is new in them
    done = subprocess.run(
        [sys.executable, "-c", _READ_BY_RELEASE],
        input=msgspec.json.encode(records),
        env={"PYTHONPATH": str(old_src)},
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["stock-quotes", "price", "v2", "12", "42"]

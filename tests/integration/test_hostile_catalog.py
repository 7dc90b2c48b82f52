"""A hostile table catalog against a real node and the real broker (issue 37, finding 1).

Whoever may write ``kiq-catalog`` once made every node serving it delete any directory: a
declaration named ``/some/path`` (or ``..``) and then its tombstone ran ``rmtree`` on
``data_dir/tables/NAME``, and one bad declaration stopped every node from starting. Here a
`kiq serve` process serving every declared table of its application is handed such records
while it runs, and another starts with them already in the catalog: directories outside
the data dir survive, and both keep serving their real table.
"""

from __future__ import annotations

import json
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from kiq.catalog import CATALOG_TOPIC
from kiq.kafka import compacted
from kiq.runtime.nodes import LocalNode
from kiq.tables.declared import Declared
from tests.integration.kafka_io import produce
from tests.integration.test_serving import NODE_ENV

pytestmark = pytest.mark.integration


class Catalog:
    """This test's records in the shared catalog, under an application of its own; every
    key written is tombstoned at the end, so no other test ever reads them."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.app = f"hostile-{uuid.uuid4().hex[:8]}"
        self.written: set[str] = set()
        compacted.ensure(bootstrap, CATALOG_TOPIC)

    def put(self, records: dict[str, bytes | None]) -> None:
        self.written.update(records)
        compacted.put(self.bootstrap, CATALOG_TOPIC, records)

    def clear(self) -> None:
        if self.written:
            compacted.put(self.bootstrap, CATALOG_TOPIC, dict.fromkeys(self.written))


@pytest.fixture
def catalog(bootstrap: str) -> Iterator[Catalog]:
    made = Catalog(bootstrap)
    yield made
    made.clear()


def hostile(app: str, topic: str, outside: Path) -> dict[str, bytes | None]:
    """Declarations whose names are paths: absolute, ``..``, and out past the data dir; each
    names the real table's topic, so a node that took one would serve it."""
    names = [str(outside), "..", "../../outside", "."]
    return {
        f"table:{app}/{name}": json.dumps(
            {"table": name, "topic": topic, "key": ["k"], "app": app}
        ).encode()
        for name in names
    }


def key_of(node: LocalNode, table: str, key: str) -> dict[str, object] | None:
    try:
        answer = httpx.get(f"{node.url}/v1/tables/{table}/keys/{key}", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def tables_of(node: LocalNode) -> set[str]:
    try:
        answer = httpx.get(f"{node.url}/v1/tables", timeout=5)
    except httpx.HTTPError:
        return set()
    if answer.status_code != 200:
        return set()
    return {t["name"] for t in answer.json()["tables"]}


def until(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def marked(catalog: Catalog, node: LocalNode, make_topic: Callable[..., str], name: str) -> None:
    """Declare a valid table after what went before and wait until ``node`` serves it: its
    catalog follower has then applied every earlier record (it applies them in order)."""
    topic = make_topic(f"hostile-{name}", partitions=1)
    declared = Declared(table=name, topic=topic, key=("k",), app=catalog.app)
    catalog.put({declared.catalog_key: declared.encode()})
    until(lambda: name in tables_of(node), f"{node.node_id} to serve {name}")


def test_hostile_declarations_and_their_tombstones_delete_nothing_and_stop_no_node(
    bootstrap: str, make_topic: Callable[..., str], catalog: Catalog, tmp_path: Path
):
    topic = make_topic("hostile-real", partitions=2)
    produce(bootstrap, topic, [("k1", '{"n":1}'), ("k2", '{"n":2}')])
    root = tmp_path / "nodes"
    outside = tmp_path / "outside"
    sentinels = [
        outside / "keep",  # the absolute name
        root / "outside" / "keep",  # n1's data_dir/tables/../../outside
        root / "n1" / "keep",  # n1's data_dir/tables/.. is its data dir
        root / "n1" / "tables" / "keep",  # data_dir/tables/.
    ]
    env = {**NODE_ENV, "KIQ_APP_NAME": catalog.app}
    cluster = f"kiq-test-{uuid.uuid4().hex[:8]}"

    def node(node_id: str) -> LocalNode:
        return LocalNode(
            node_id=node_id,
            bootstrap=bootstrap,
            # every table the catalog declares for the application, and the operator's own
            tables=["*", f"real={topic},standby=0"],
            data_dir=root / node_id,
            log_file=root / f"{node_id}.log",
            extra_args=["--cluster", cluster],
            env=env,
        )

    n1 = node("n1")
    n2 = node("n2")
    try:
        n1.start()
        n1.wait_ready(90)
        until(lambda: key_of(n1, "real", "k1") == {"n": 1}, "n1 to serve its real table")
        for path in sentinels:
            path.mkdir(parents=True, exist_ok=True)
        assert stat.S_IMODE((root / "n1").stat().st_mode) == 0o700, "the data dir is private"

        # While n1 runs: the hostile declarations, then their tombstones.
        records = hostile(catalog.app, topic, outside)
        catalog.put(records)
        catalog.put(dict.fromkeys(records))
        marked(catalog, n1, make_topic, "marker-1")
        for path in sentinels:
            assert path.is_dir(), f"{path} was deleted"
        assert key_of(n1, "real", "k2") == {"n": 2}, "n1 keeps serving its real table"
        assert not {"..", ".", "outside"} & tables_of(n1)

        # A node started with the hostile records already in the catalog starts and serves.
        catalog.put(records)
        n2.start()
        n2.wait_ready(90)
        until(lambda: key_of(n2, "real", "k1") == {"n": 1}, "n2 to serve the real table")
        (root / "n2" / "keep").mkdir()
        catalog.put(dict.fromkeys(records))
        marked(catalog, n2, make_topic, "marker-2")
        for path in [*sentinels, root / "n2" / "keep"]:
            assert path.is_dir(), f"{path} was deleted"
        for n in (n1, n2):
            assert key_of(n, "real", "k2") == {"n": 2}, f"{n.node_id} keeps serving"
        n1_log = (root / "n1.log").read_text()
        assert "catalog record refused" in n1_log and "is not a table name" in n1_log
    finally:
        n2.stop()
        n1.stop()

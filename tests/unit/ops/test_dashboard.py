"""The dashboard's side of a node: its files at /ui for anyone, its data for admins only, and
the figures /v1/status gives (counts and latency quantiles from the lookup path's own)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq.metrics import LATENCY_BUCKETS
from kiq.ops.dashboard import ASSETS, pipelines_json, quantile
from kiq.progress import ProgressReader, QueryProgress
from kiq.replicas import ReplicaState
from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from kiq.settings import LimitsSettings
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, Response, call, serving, start_node, wait_until


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    """A node that checks tokens, serving table ``t`` (one partition, active here)."""
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("t", 0)])
    local = start_node(
        tmp_path,
        cluster,
        {"t=t,standby=0": 1},
        "n1",
        security=Security(TokenCache(verifier), ClusterKey(b"g" * 32)),
        limits=LimitsSettings(auth_failure_rate=0),
    )
    wait_until(serving(local.node, ReplicaState.ACTIVE), what="n1 active")
    local.put("t", "k", b'{"v":1}', 0)
    yield local
    local.node.stop()


def get(local: LocalNode, target: str, scope: str | None = None) -> Response:
    headers = [(b"authorization", f"Bearer {hs256(scope=scope)}".encode())] if scope else []
    return asyncio.run(call(local.app, "GET", target, headers=headers))


@pytest.mark.parametrize(
    ("target", "media"),
    [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/index.html", "text/html"),
        ("/ui/dashboard.js", "text/javascript"),
        ("/ui/dashboard.css", "text/css"),
    ],
)
def test_the_page_and_its_files_are_open_to_anyone(node: LocalNode, target: str, media: str):
    r = get(node, target)
    assert r.status == 200 and r.headers["content-type"].startswith(media)
    assert r.headers["cache-control"] == "no-cache" and r.body


def test_no_other_file_is_served_from_ui(node: LocalNode):
    for target in ("/ui/nope.js", "/ui/%2E%2E/dashboard.py", "/ui/ui/index.html"):
        r = get(node, target)
        assert r.status == 404, target
        assert r.json()["error"] == "no_route"


def test_the_page_fetches_nothing_from_elsewhere():
    """No CDN, no font, no script of another origin: every URL in the files is this node's."""
    page = (Path(__file__).parents[3] / "src/kiq/ops/ui").resolve()
    assert {p.name for p in page.iterdir()} == set(ASSETS)
    for name in ASSETS:
        text = (page / name).read_text()
        assert not re.search(r"https?:|[\"'(]//", text), name  # no URL of another origin
    index = (page / "index.html").read_text()
    assert re.findall(r'(?:src|href)="([^"]+)"', index) == ["/ui/dashboard.css", "/ui/dashboard.js"]


@pytest.mark.parametrize("path", ["/v1/status", "/v1/pipelines"])
def test_what_the_page_reads_needs_an_admin_token(node: LocalNode, path: str):
    assert get(node, path).status == 401
    assert get(node, path, scope="kiq:read").status == 403
    assert get(node, path, scope="kiq:admin").status == 200


def test_status_counts_lookups_by_status_with_their_latency(node: LocalNode):
    for key in ("k", "k", "missing"):
        get(node, f"/v1/tables/t/keys/{key}", scope="kiq:read")
    status = get(node, "/v1/status", scope="kiq:admin").json()
    assert status["node"] == "n1"
    assert status["bounds_ms"] == [round(b * 1000, 3) for b in LATENCY_BUCKETS]
    lookups = status["routes"]["get"]
    assert lookups["requests"] == 3 and lookups["statuses"] == {"200": 2, "404": 1}
    assert sum(lookups["buckets"]) == 3 and lookups["sum_s"] > 0
    assert 0 < lookups["p50_ms"] <= lookups["p99_ms"]
    table = status["tables"]["t"]
    assert table["partitions"] == 1 and table["replicas"] == {"active": 1}
    assert table["max_lag"] == 0 and table["dead_letters"] == 0


def test_a_node_not_given_where_progress_is_says_so(node: LocalNode):
    answer = get(node, "/v1/pipelines", scope="kiq:admin").json()
    assert answer["queries"] == [] and "does not read" in answer["error"]


def test_pipelines_answers_what_the_reader_read():
    record = QueryProgress(app="a", pipeline="p", query="q", batch=3, input_rows_per_s=2.5)

    def read_latest(*args: object, **kwargs: object) -> dict[str, bytes]:
        return {record.key: record.encode()}

    answer = orjson.loads(pipelines_json(ProgressReader("b", "a", read_latest=read_latest)))
    (row,) = answer["queries"]
    assert (row["query"], row["batch"], row["input_rows_per_s"]) == ("q", 3, 2.5)
    assert answer["error"] is None


def test_quantiles_interpolate_within_a_bucket_as_prometheus_does():
    bounds = [b * 1000 for b in LATENCY_BUCKETS]
    counts = [0] * (len(bounds) + 1)
    assert quantile(counts, 0.5) is None
    counts[1] = 10  # all between 0.2 and 0.5 ms
    assert quantile(counts, 0.5) == pytest.approx(bounds[0] + (bounds[1] - bounds[0]) * 0.5)
    assert quantile(counts, 1.0) == pytest.approx(bounds[1])
    counts[-1] = 90  # 90 slower than the last bound: the p99 is "over 1 s", said as 1 s
    assert quantile(counts, 0.99) == bounds[-1]
    assert quantile(counts, 0.05) == pytest.approx(bounds[0] + (bounds[1] - bounds[0]) * 0.5)

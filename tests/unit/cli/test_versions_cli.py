"""`kiq versions`, `switch`, `retire` and `diff` against a stand-in node speaking the
contract of docs/versions.md (an httpx.MockTransport): the commands' own logic, not the
node's (tests/unit/api has that)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from kiq.cli import versions as versions_cli
from kiq.cli.checkpoints import drop_checkpoint
from kiq.cli.main import app

runner = CliRunner()


@dataclass
class Version:
    rows: dict[str, Any]
    # caught_up answers still to give as False before the version catches up
    polls_behind: int = 0
    lag: int = 0
    behind: int | None = 0


@dataclass
class FakeNode:
    """One table's versions, as GET /versions, /range, POST /switch and /retire answer."""

    table: str = "bars"
    current: str = "v1"
    versions: dict[str, Version] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    answers: dict[str, httpx.Response] = field(default_factory=dict)
    served_version: str | None = None  # forces a wrong x-kiq-version

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        canned = self.answers.get(f"{request.method} {path}")
        if canned is not None:
            return canned
        prefix = f"/v1/tables/{self.table}/"
        if not path.startswith(prefix):
            return _error(404, "not_found", f"no table {path.split('/')[3]}")
        what = path.removeprefix(prefix)
        if what == "versions":
            return httpx.Response(200, json=self._listing())
        if what == "range":
            return self._range(request)
        return _error(404, "not_found", path)

    def _listing(self) -> dict[str, Any]:
        listed = []
        for name, v in self.versions.items():
            behind = v.polls_behind > 0
            if behind:
                v.polls_behind -= 1
            listed.append(
                {
                    "version": name,
                    "current": name == self.current,
                    "name": self.table if name == "v1" else f"{self.table}@{name}",
                    "topic": self.table if name == "v1" else f"{self.table}.{name}",
                    "keys": len(v.rows),
                    "lag": v.lag if behind else 0,
                    "behind": v.behind if behind else 0,
                    "pipeline_state": "running",
                    "serving": True,
                    "caught_up": not behind,
                }
            )
        return {"table": self.table, "current": self.current, "versions": listed}

    def _range(self, request: httpx.Request) -> httpx.Response:
        version = request.url.params["version"]
        limit = int(request.url.params["limit"])
        after = request.url.params.get("cursor")
        keys = sorted(self.versions[version].rows, key=str.encode)
        if after is not None:
            keys = [k for k in keys if k.encode() > after.encode()]
        page = keys[:limit]
        more = len(keys) > limit
        return httpx.Response(
            200,
            json={
                "items": [{"key": k, "value": self.versions[version].rows[k]} for k in page],
                "next_cursor": page[-1] if more else None,
            },
            headers={"x-kiq-version": self.served_version or version},
        )

    def ranges(self, version: str) -> list[httpx.Request]:
        return [
            r
            for r in self.requests
            if r.url.path.endswith("/range") and r.url.params["version"] == version
        ]

    def polls(self) -> int:
        return sum(r.url.path.endswith("/versions") for r in self.requests)


def _error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": code, "message": message})


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, FakeNode]]:
    """Fake nodes by host: http://a:8080 and http://b:8080."""
    found: dict[str, FakeNode] = {"a": FakeNode(), "b": FakeNode()}

    def handle(request: httpx.Request) -> httpx.Response:
        return found[request.url.host].handle(request)

    monkeypatch.setattr(versions_cli, "transport", httpx.MockTransport(handle))
    monkeypatch.setattr(versions_cli, "POLL_S", 0.0)
    monkeypatch.delenv("KIQ_TOKEN", raising=False)
    yield found


A = "http://a:8080"
B = "http://b:8080"


def _rows(n: int, **extra: Any) -> dict[str, Any]:
    return {f"k{i:03d}": {"v": i, **extra} for i in range(n)}


def test_versions_lists_each_version(nodes):
    nodes["a"].versions = {"v1": Version(_rows(3)), "v2": Version(_rows(4))}
    result = runner.invoke(app, ["versions", "bars", "--url", A])
    assert result.exit_code == 0, result.output
    assert "bars.v2" in result.stdout and "v1" in result.stdout
    result = runner.invoke(app, ["versions", "bars", "--url", A, "--json"])
    doc = orjson.loads(result.stdout)
    assert [v["version"] for v in doc["versions"]] == ["v1", "v2"]
    assert doc["versions"][1]["keys"] == 4


def test_an_error_is_one_line_with_the_nodes_message(nodes):
    result = runner.invoke(app, ["versions", "nope", "--url", A])
    assert result.exit_code == 1
    assert "no table nope" in result.stderr and "HTTP 404" in result.stderr
    assert "Traceback" not in result.output


def test_the_default_url_is_the_configs_advertised_one(nodes, tmp_path):
    nodes["b"].versions = {"v1": Version({})}
    config = tmp_path / "kiq.toml"
    config.write_text('[serve]\nadvertise = "http://b:8080"\n')
    result = runner.invoke(app, ["versions", "bars", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    assert nodes["b"].polls() == 1 and nodes["a"].polls() == 0


def test_token_from_the_environment_is_a_bearer_token(nodes, monkeypatch):
    nodes["a"].versions = {"v1": Version({})}
    monkeypatch.setenv("KIQ_TOKEN", "s3cret")
    assert runner.invoke(app, ["versions", "bars", "--url", A]).exit_code == 0
    assert nodes["a"].requests[-1].headers["authorization"] == "Bearer s3cret"


def test_switch_prints_the_move(nodes):
    nodes["a"].answers["POST /v1/tables/bars/switch"] = httpx.Response(
        200,
        json={
            "table": "bars",
            "version": "v2",
            "previous": "v1",
            "took_ms": 41.3,
            "nodes": {"node-1": "v2", "node-2": "v2", "node-3": "v2"},
        },
    )
    result = runner.invoke(app, ["switch", "bars", "v2", "--url", A, "--force"])
    assert result.exit_code == 0, result.output
    assert "bars: v1 -> v2 on 3 nodes in 41 ms" in result.stdout
    assert orjson.loads(nodes["a"].requests[-1].content) == {"version": "v2", "force": True}


def test_switch_names_nodes_that_did_not_move(nodes):
    nodes["a"].answers["POST /v1/tables/bars/switch"] = httpx.Response(
        200,
        json={
            "table": "bars",
            "version": "v2",
            "previous": "v1",
            "took_ms": 10000,
            "nodes": {"node-1": "v2", "node-2": "v1", "node-3": "unreachable"},
        },
    )
    result = runner.invoke(app, ["switch", "bars", "v2", "--url", A])
    assert result.exit_code == 0
    assert "bars: v1 -> v2 on 1 of 3 nodes in 10,000 ms" in result.stdout
    assert "node-2 still answers v1" in result.stderr
    assert "node-3 unreachable" in result.stderr


def test_switch_refused(nodes):
    nodes["a"].answers["POST /v1/tables/bars/switch"] = _error(
        409, "conflict", "v2 is not caught up: 120 records behind"
    )
    result = runner.invoke(app, ["switch", "bars", "v2", "--url", A])
    assert result.exit_code == 1
    assert "v2 is not caught up: 120 records behind" in result.stderr


def _retired(
    checkpoint: str | None, last: bool = True, run: str | None = "stocks", **more: Any
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "table": "bars",
            "version": "v1",
            "run": run,
            "topics_deleted": ["bars", "bars-dlq"],
            **more,
            "checkpoint": checkpoint,
            "last_of_run": last,
            "nodes": {"node-1": "dropped", "node-2": "dropped"},
        },
    )


def test_retire_deletes_a_local_checkpoint(nodes, tmp_path):
    where = tmp_path / "checkpoints" / "stocks"
    (where / "bars" / "offsets").mkdir(parents=True)
    nodes["a"].answers["POST /v1/tables/bars/retire"] = _retired(str(where))
    root = str(tmp_path / "checkpoints")
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A, "--checkpoint", root])
    assert result.exit_code == 0, result.output
    assert "retired v1 (dropped on 2 nodes)" in result.stdout
    assert "deleted topic bars-dlq" in result.stdout
    assert f"deleted checkpoint {where}" in result.stdout
    assert not where.exists() and where.parent.exists()
    assert orjson.loads(nodes["a"].requests[-1].content) == {"version": "v1"}


def test_retire_names_nodes_that_still_serve_it(nodes):
    answer = _retired(None, last=False)
    body = orjson.loads(answer.content)
    body["nodes"]["node-2"] = "serving"
    nodes["a"].answers["POST /v1/tables/bars/retire"] = httpx.Response(200, json=body)
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A])
    assert result.exit_code == 0
    assert "dropped on 1 of 2 nodes" in result.stdout and "node-2 is serving" in result.stderr


def test_retire_refused(nodes):
    nodes["a"].answers["POST /v1/tables/bars/retire"] = _error(
        409, "conflict", "bars v1 is the version its name serves: switch to another first"
    )
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A])
    assert result.exit_code == 1 and "switch to another first" in result.stderr


def test_retire_prints_a_remote_checkpoint_for_the_user(nodes):
    nodes["a"].answers["POST /v1/tables/bars/retire"] = _retired("s3a://bucket/ckpt/stocks")
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A])
    assert result.exit_code == 0
    assert "s3a://bucket/ckpt/stocks is no longer used: delete it" in result.stdout


def test_retire_keeps_a_checkpoint_still_in_use(nodes):
    nodes["a"].answers["POST /v1/tables/bars/retire"] = _retired(None, last=False)
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A])
    assert result.exit_code == 0 and "checkpoint kept" in result.stdout


def test_retire_leaves_a_path_it_does_not_have(nodes, tmp_path):
    gone = tmp_path / "elsewhere" / "stocks"
    nodes["a"].answers["POST /v1/tables/bars/retire"] = _retired(str(gone))
    root = str(gone.parent)
    result = runner.invoke(app, ["retire", "bars", "v1", "--url", A, "--checkpoint", root])
    assert result.exit_code == 0 and "not on this machine" in result.stdout


def test_diff_of_equal_versions_exits_0_and_pages_through_both(nodes):
    nodes["a"].versions = {"v1": Version(_rows(7)), "v2": Version(_rows(7))}
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--page", "2"])
    assert result.exit_code == 0, result.output
    assert "v1 vs v2: equal" in result.stdout
    assert "7 keys: 7 equal" in result.stdout
    # 7 keys, 2 a page: 4 pages each side, each after the previous page's cursor
    for version in ("v1", "v2"):
        pages = nodes["a"].ranges(version)
        assert len(pages) == 4
        assert [p.url.params.get("cursor") for p in pages] == [None, "k001", "k003", "k005"]
        assert all(p.url.params["limit"] == "2" for p in pages)


def test_diff_reports_differences_and_exits_1(nodes):
    old = _rows(10)
    new = {k: ({"v": v["v"] + 100} if k in ("k002", "k005") else v) for k, v in old.items()}
    del new["k009"]
    new["k100"] = {"v": 0}
    nodes["a"].versions = {"v1": Version(old), "v2": Version(new)}
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--json", "--sample", "1"])
    assert result.exit_code == 1, result.output
    doc = orjson.loads(result.stdout)
    assert doc["from"] == "v1" and doc["to"] == "v2" and doc["equal"] is False
    assert doc["counts"] == {
        "compared": 11,
        "equal": 7,
        "changed": 2,
        "only_from": 1,
        "only_to": 1,
    }
    assert doc["examples"]["changed"] == [
        {"key": "k002", "changes": [{"path": "v", "old": 2, "new": 102}]}
    ]
    assert doc["fields"] == {"v": 2}


def test_diff_ignore_and_tolerance_reach_the_comparison(nodes):
    nodes["a"].versions = {
        "v1": Version({"k": {"p": 1.0, "ts": 1}}),
        "v2": Version({"k": {"p": 1.004, "ts": 2}}),
    }
    args = ["diff", "bars", "--url", A, "--json"]
    assert runner.invoke(app, args).exit_code == 1
    result = runner.invoke(app, [*args, "--ignore", "ts", "--tolerance", "0.01"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["counts"]["equal"] == 1


def test_diff_waits_until_both_are_caught_up(nodes):
    nodes["a"].versions = {
        "v1": Version(_rows(2)),
        "v2": Version(_rows(2), polls_behind=3, lag=5, behind=100),
    }
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--timeout", "30"])
    assert result.exit_code == 0, result.output
    # three listings say v2 is behind (the one the versions are picked from, then two
    # polls), the next says caught up, and only then is anything read
    assert nodes["a"].polls() == 4
    assert nodes["a"].ranges("v2"), "read only once caught up"


def test_diff_times_out_saying_who_is_behind(nodes):
    nodes["a"].versions = {
        "v1": Version(_rows(2)),
        "v2": Version(_rows(2), polls_behind=10**6, lag=20, behind=100),
    }
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--timeout", "0"])
    assert result.exit_code == 2
    err = " ".join(result.stderr.split())
    assert "v2 is behind: 120 records to go" in err
    assert "v1 is behind" not in err
    assert not nodes["a"].ranges("v1"), "nothing read before both caught up"


def test_diff_defaults_to_current_and_newest_other(nodes):
    nodes["a"].current = "v2"
    nodes["a"].versions = {name: Version({}) for name in ("v1", "v2", "v9", "v10")}
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert (doc["from"], doc["to"]) == ("v2", "v10")


def test_diff_of_a_table_without_a_current_version_asks_for_from(nodes):
    nodes["a"].current = None  # type: ignore[assignment]
    nodes["a"].versions = {"v1": Version({}), "v2": Version({})}
    result = runner.invoke(app, ["diff", "bars", "--url", A])
    assert result.exit_code == 2 and "name one with --from" in result.stderr
    assert runner.invoke(app, ["diff", "bars", "--url", A, "--from", "v1"]).exit_code == 0


def test_diff_with_one_version_or_an_unknown_one_is_an_error(nodes):
    nodes["a"].versions = {"v1": Version({})}
    result = runner.invoke(app, ["diff", "bars", "--url", A])
    assert result.exit_code == 2 and "nothing to compare" in result.stderr
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--to", "v3"])
    assert result.exit_code == 2 and "no version v3" in result.stderr


def test_diff_of_an_unknown_table_exits_2(nodes):
    result = runner.invoke(app, ["diff", "nope", "--url", A])
    assert result.exit_code == 2
    assert "no table nope" in result.stderr and "Traceback" not in result.output


def test_diff_of_an_unreachable_node_exits_2(monkeypatch):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(versions_cli, "transport", httpx.MockTransport(refuse))
    result = runner.invoke(app, ["diff", "bars", "--url", A])
    assert result.exit_code == 2
    assert f"cannot reach {A}" in result.stderr


def test_diff_refuses_a_page_of_another_version(nodes):
    nodes["a"].versions = {"v1": Version(_rows(1)), "v2": Version(_rows(1))}
    nodes["a"].served_version = "v1"
    result = runner.invoke(app, ["diff", "bars", "--url", A])
    assert result.exit_code == 2 and "answered with version v1" in result.stderr


def test_diff_across_two_nodes(nodes):
    nodes["a"].versions = {"v1": Version(_rows(3))}
    nodes["b"].versions = {"v1": Version(_rows(3)), "v2": Version(_rows(4))}
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--url", B, "--json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert (doc["from"], doc["to"]) == (f"v1@{A}", f"v1@{B}")
    assert nodes["a"].ranges("v1") and nodes["b"].ranges("v1")
    result = runner.invoke(app, ["diff", "bars", "--url", A, "--url", B, "--to", "v2"])
    assert result.exit_code == 1 and "1 only in v2@" in result.stdout


def test_a_url_that_is_not_one(nodes):
    result = runner.invoke(app, ["diff", "bars", "--url", "a:8080"])
    assert result.exit_code == 2 and "not an http:// or https:// URL" in result.stderr


def test_the_commands_are_registered():
    result = runner.invoke(app, ["--help"])
    for name in ("diff", "versions", "switch", "retire"):
        assert name in result.output


def test_checkpoint_near_the_root_is_never_deleted(tmp_path: Path):
    assert "delete it yourself" in drop_checkpoint("/tmp", "/", "tmp", "v1")
    assert "delete it yourself" in drop_checkpoint("relative/stocks", "relative", "stocks", "v1")

"""`kiq retire` deletes a checkpoint only when it is the retired run's own directory right
under the configured checkpoint root (kiq.cli.checkpoints): a forged declaration's path
outside the root, a symlink out of it, another run's name, all survive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from kiq.cli import versions as versions_cli
from kiq.cli.checkpoints import checkpoint_to_drop
from kiq.cli.main import app

runner = CliRunner()
A = "http://a:8080"


@pytest.fixture
def answer(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The node's answer to POST .../retire; a test fills in checkpoint, run, version."""
    body: dict[str, Any] = {
        "table": "bars",
        "version": "v2",
        "run": "stocks@v2",
        "topics_deleted": [],
        "topics_kept": [],
        "checkpoint": None,
        "last_of_run": True,
        "nodes": {"n1": "dropped"},
    }

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    monkeypatch.setattr(versions_cli, "transport", httpx.MockTransport(handle))
    monkeypatch.delenv("KIQ_TOKEN", raising=False)
    monkeypatch.delenv("KIQ_SPARK_CHECKPOINT_DIR", raising=False)
    yield body


def _checkpoint(root: Path, name: str) -> Path:
    where = root / name
    (where / "bars" / "offsets").mkdir(parents=True)
    return where


def _retire(root: Path, version: str = "v2", *more: str) -> Any:
    args = ["retire", "bars", version, "--url", A, "--checkpoint", str(root), *more]
    return runner.invoke(app, args)


def test_the_runs_own_directory_under_the_root_is_deleted(answer, tmp_path: Path):
    root = tmp_path / "checkpoints"
    where = _checkpoint(root, "stocks@v2")
    v1 = _checkpoint(root, "stocks")
    answer["checkpoint"] = str(where)
    result = _retire(root)
    assert result.exit_code == 0, result.output
    assert f"deleted checkpoint {where}" in result.stdout
    assert not where.exists() and v1.is_dir()


def test_a_forged_checkpoint_outside_the_root_survives(answer, tmp_path: Path):
    root = tmp_path / "checkpoints"
    _checkpoint(root, "stocks@v2")
    precious = tmp_path / "home" / "operator"
    (precious / "work").mkdir(parents=True)
    answer["checkpoint"] = str(precious)
    result = _retire(root)
    assert result.exit_code == 0, result.output
    assert precious.is_dir() and (precious / "work").is_dir()
    assert f"checkpoint {precious} kept" in " ".join(result.stdout.split())
    # the same with the root's own name on it, and through ".." and file://
    for forged in (
        tmp_path / "stocks@v2",
        root / ".." / "home",
        root / "stocks@v2" / "..",
        f"file://{precious}",
    ):
        answer["checkpoint"] = str(forged)
        assert _retire(root).exit_code == 0
    assert precious.is_dir() and (root / "stocks@v2").is_dir() and root.is_dir()


def test_a_symlink_out_of_the_root_is_not_followed(answer, tmp_path: Path):
    root = tmp_path / "checkpoints"
    root.mkdir()
    precious = tmp_path / "precious"
    (precious / "data").mkdir(parents=True)
    (root / "stocks@v2").symlink_to(precious)
    answer["checkpoint"] = str(root / "stocks@v2")
    result = _retire(root)
    assert result.exit_code == 0, result.output
    assert (precious / "data").is_dir() and (root / "stocks@v2").is_symlink()
    assert "kept" in result.stdout


def test_another_runs_directory_or_a_run_the_node_did_not_name_survives(answer, tmp_path: Path):
    root = tmp_path / "checkpoints"
    other = _checkpoint(root, "stocks")  # v1's, while v2 is retired
    answer["checkpoint"] = str(other)
    assert _retire(root).exit_code == 0
    assert other.is_dir()
    # the node says run "stocks" for v2: not how v2's run is named
    answer["run"] = "stocks"
    assert _retire(root).exit_code == 0
    assert other.is_dir()
    answer["run"] = None  # an older node: no run named
    mine = _checkpoint(root, "stocks@v2")
    answer["checkpoint"] = str(mine)
    result = _retire(root)
    assert mine.is_dir() and "named no pipeline version v2" in result.stdout


def test_the_root_comes_from_the_config(answer, tmp_path: Path):
    root = tmp_path / "ck"
    where = _checkpoint(root, "stocks@v2")
    config = tmp_path / "kiq.toml"
    config.write_text('[spark]\ncheckpoint_dir = "ck"\n')  # beside the file
    answer["checkpoint"] = str(where)
    result = runner.invoke(app, ["retire", "bars", "v2", "--url", A, "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert not where.exists()


@pytest.mark.parametrize(
    ("where", "run", "version", "kept"),
    [
        ("/r/ck/stocks@v2", "stocks@v2", "v2", False),
        ("/r/ck/stocks", "stocks", "v1", False),
        ("/r/ck/stocks@v2", "stocks@v2", "v3", True),  # another version's run
        ("/r/ck/..", "..", "v1", True),
        ("/r/ck/a/b", "a/b", "v1", True),
        ("/r/ck/x@v1", "x@v1", "v1", True),  # v1's run has no @
        ("/r/ck/stocks@v2", "", "v2", True),
        ("/r/stocks@v2", "stocks@v2", "v2", True),  # beside the root, not in it
    ],
)
def test_checkpoint_to_drop_decides(tmp_path: Path, where: str, run: str, version: str, kept):
    base = tmp_path / "r" / "ck"
    (base / "stocks@v2").mkdir(parents=True)
    (base / "stocks").mkdir()
    path = where.replace("/r", str(tmp_path / "r"), 1)
    found = checkpoint_to_drop(path, str(base), run, version)
    assert isinstance(found, str) is kept, found


def test_a_remote_checkpoint_is_left_to_the_operator():
    found = checkpoint_to_drop("s3a://bucket/ck/stocks@v2", "s3a://bucket/ck", "stocks@v2", "v2")
    assert isinstance(found, str) and "delete it there" in found

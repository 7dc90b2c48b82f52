"""What a runtime install holds: typed, no load client; `kiq bench` names the extra it needs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import grimp
import pytest
from typer.testing import CliRunner

from kiq.cli import bench
from kiq.cli.main import app

ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BENCH_MESSAGE = "kiq bench needs the bench extra: pip install 'kiq[bench]'"


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[=<>!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def _bench_only_distributions() -> set[str]:
    """The third-party distributions kiq.bench imports and no other kiq module does."""
    graph = grimp.build_graph("kiq", include_external_packages=True)
    bench_uses: set[str] = set()
    runtime_uses: set[str] = set()
    for module in graph.modules:
        if not module.startswith("kiq"):
            continue
        uses = bench_uses if module.startswith("kiq.bench") else runtime_uses
        uses.update(m for m in graph.find_modules_directly_imported_by(module) if "." not in m)
    third_party = bench_uses - runtime_uses - set(sys.stdlib_module_names) - {"kiq"}
    dists = packages_distributions()
    return {dist.lower() for m in third_party for dist in dists.get(m, [m])}


def test_a_runtime_install_brings_no_load_client():
    extras = PROJECT["project"]["optional-dependencies"]
    runtime = _names(PROJECT["project"]["dependencies"])
    bench_only = _bench_only_distributions()
    assert bench_only, "kiq.bench imports nothing the runtime does not: drop the bench extra"
    assert _names(extras["bench"]) == bench_only
    assert not bench_only & runtime
    assert bench_only <= _names(extras["dev"]), "make setup installs .[dev]: it needs the bench's"
    assert set(bench.BENCH_EXTRA) == bench_only


def test_no_module_outside_the_bench_imports_aiohttp():
    code = (
        "import importlib, pkgutil, sys, kiq\n"
        "for m in pkgutil.walk_packages(kiq.__path__, 'kiq.'):\n"
        "    if not m.name.startswith('kiq.bench') and not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "print('aiohttp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_package_says_it_is_typed():
    assert (ROOT / "src" / "kiq" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["kiq"]


@pytest.fixture
def no_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without the bench extra: importing aiohttp fails, as it would there."""
    monkeypatch.setitem(sys.modules, "aiohttp", None)


@pytest.mark.usefixtures("no_aiohttp")
def test_without_the_extra_kiq_starts_and_bench_says_what_to_install():
    runner = CliRunner()
    assert runner.invoke(app, ["--help"]).exit_code == 0
    assert runner.invoke(app, ["bench", "--help"]).exit_code == 0
    result = runner.invoke(app, ["bench", "failover", "--keys", "1"])
    assert result.exit_code == 1
    assert BENCH_MESSAGE in result.output
    assert "Traceback" not in result.output

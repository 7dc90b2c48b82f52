"""`kiq new` says how to test what it wrote, and kiq's `test` extra brings what that needs.

A scaffold tested with a bare ``pytest`` in a fresh environment met the system's pytest,
which has no kiq; the closing message and the scaffold's README now name the extra and a
command that runs the environment's own pytest.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.cli.new import FILES, INSTALL_TEST, TEMPLATE, TEST_TIME, run_tests_command

ROOT = Path(__file__).resolve().parents[3]


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def _pin(requirements: list[str], name: str) -> str | None:
    return next((r for r in requirements if r.split("==")[0] == name), None)


def test_the_test_extra_brings_a_pinned_pytest_in_step_with_dev():
    extras = _project()["project"]["optional-dependencies"]
    pytest_pin = _pin(extras["test"], "pytest")
    assert pytest_pin is not None and "==" in pytest_pin
    assert pytest_pin == _pin(extras["dev"], "pytest")
    assert INSTALL_TEST == "pip install 'kiq[test]'"


def test_kiq_new_names_the_install_and_the_test_command(tmp_path: Path):
    target = tmp_path / "shop"

    out = CliRunner().invoke(app, ["new", "shop", "--dir", str(target)])

    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any(line.strip().startswith(INSTALL_TEST + " ") for line in lines), out.output
    command = run_tests_command(target)
    assert command == f"python -m pytest {target}"
    assert any(line.strip().startswith(command + " ") for line in lines), out.output
    assert TEST_TIME in out.output and "seconds" not in out.output


def test_the_scaffolds_readme_says_how_to_test_it_and_how_long_it_takes(tmp_path: Path):
    CliRunner().invoke(app, ["new", "shop", "--dir", str(tmp_path)])

    readme = (tmp_path / "README.md").read_text()
    assert INSTALL_TEST in readme and "python -m pytest" in readme
    assert TEST_TIME in readme


def test_every_file_kiq_new_copies_ships_in_the_wheel():
    data = _project()["tool"]["setuptools"]["package-data"]
    package = TEMPLATE.rsplit(".", 1)[0]  # kiq.apps
    here = TEMPLATE.rsplit(".", 1)[1]  # pageviews
    for file in FILES:
        if file.endswith(".py"):
            continue  # modules ship as modules
        patterns = data[package]
        assert any(fnmatch.fnmatch(f"{here}/{file}", p) for p in patterns), (file, patterns)

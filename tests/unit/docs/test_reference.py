"""The docs site's generated references agree with the code they describe.

scripts/docs_reference.py makes the configuration, CLI and HTTP reference pages when the
site is built. Here each default the configuration reference states is read back and
compared with what a section holds when nothing is configured, and each default the CLI
help writes by hand (``[8080]``) with the setting of that flag: a default stated apart from
the settings tree that disagrees with it fails.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kiq_docs_reference", ROOT / "scripts" / "docs_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ref = _reference()


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No kiq.toml and no KIQ_* variable: every section at its defaults."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in __import__("os").environ if n.startswith("KIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def _rows(markdown: str) -> dict[str, dict[str, dict[str, str]]]:
    """{table: {setting: {column: cell}}} of the configuration reference."""
    tables: dict[str, dict[str, dict[str, str]]] = {}
    current: dict[str, dict[str, str]] | None = None
    header: list[str] = []
    for line in markdown.splitlines():
        heading = re.fullmatch(r"## `\[(\w+)\]`", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
            continue
        if current is None or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[0] == "setting":
            header = cells
            continue
        row = dict(zip(header, cells, strict=True))
        current[row["setting"].strip("`")] = row
    return tables


def _value(cell: str, like: Any) -> Any:
    """A default cell read back as the Python value it states."""
    text = cell.strip("`")
    if text == "unset":
        return None
    if isinstance(like, Path):
        return Path(text).expanduser()
    if text in ("true", "false"):
        return text == "true"
    return json.loads(text)


def test_every_setting_of_every_section_is_in_the_configuration_reference(nowhere: Path) -> None:
    tables = _rows(ref.configuration_markdown())
    sections = ref.sections()
    assert {s.table for s in sections} >= {"broker", "serve", "limits", "auth", "feed"}
    for section in sections:
        assert set(tables[section.table]) == set(section.model_fields), section.table


def config_disagreements(markdown: str, here: Path) -> tuple[list[str], int]:
    """Each default (and environment name) of the configuration reference ``markdown``
    that is not what a section holds when nothing is configured; and how many were read."""
    from kiq import settings

    tables = _rows(markdown)
    wrong, checked = [], 0
    for section in ref.sections():
        loaded = settings.load(section)  # nothing given: no flags, no env, no file
        for name, row in tables[section.table].items():
            actual = getattr(loaded, name)
            stated = _value(row["default"], actual)
            if isinstance(actual, Path) and actual.is_relative_to(here):
                actual = actual.relative_to(here)
            if stated != actual:
                wrong.append(f"[{section.table}] {name}: reference says {row['default']}")
            if row["environment"].strip("`") != f"KIQ_{section.table.upper()}_{name.upper()}":
                wrong.append(f"[{section.table}] {name}: reference says {row['environment']}")
            checked += 1
    return wrong, checked


def test_each_default_in_the_configuration_reference_is_the_settings_tree_default(
    nowhere: Path,
) -> None:
    wrong, checked = config_disagreements(ref.configuration_markdown(), nowhere)
    assert not wrong
    assert checked > 100


def test_a_wrong_default_in_the_configuration_reference_is_caught(nowhere: Path) -> None:
    text = ref.configuration_markdown()
    cell = "| `8080` | `KIQ_SERVE_PORT`"
    assert cell in text
    wrong, _ = config_disagreements(text.replace(cell, "| `8081` | `KIQ_SERVE_PORT`"), nowhere)
    assert wrong == ["[serve] port: reference says `8081`"]


# Defaults a command sets apart from any setting, on purpose.
OWN_DEFAULTS = {
    ("kiq demo", "--rate"): "the demo's feed rate (kiq demo passes it to kiq feed stocks)",
}


def _literal(text: str) -> Any:
    """The value a help's ``[...]`` states, or None when it is prose (``port+1``)."""
    text = text.removeprefix("default: ").strip()
    if text in ("on", "off"):
        return text == "on"
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return float(text)
    if re.fullmatch(r"[\w.:/*\[\]-]+", text) and not re.search(r"[A-Z]{2,}|\+", text):
        return text
    return None


def _same(stated: Any, default: Any) -> bool:
    if default in ("", None):  # derived from other settings: the help may say how
        return True
    if isinstance(default, bool) or not isinstance(default, int | float):
        if isinstance(default, list):
            return stated == ",".join(map(str, default))
        return stated == (str(default) if isinstance(default, Path) else default)
    return isinstance(stated, float) and stated == float(default)


def cli_help_disagreements(root: Any) -> list[str]:
    """Each option whose help writes a default (``[8080]``) other than its setting's."""
    by_flag: dict[str, list[Any]] = {}
    for section in ref.sections():
        for name, field in section.model_fields.items():
            by_flag.setdefault(ref.flag_name(section, name), []).append(ref.default_of(field))
    wrong = []
    for path, command in ref._commands(root, ("kiq",)):
        for param in command.params:
            written = re.search(r"\[([^\[\]]*)\]\s*$", getattr(param, "help", None) or "")
            flag = (getattr(param, "opts", None) or [""])[0]
            if not written or flag not in by_flag or (" ".join(path), flag) in OWN_DEFAULTS:
                continue
            stated = _literal(written.group(1))
            if stated is not None and not any(_same(stated, d) for d in by_flag[flag]):
                wrong.append(f"{' '.join(path)} {flag}: help says [{written.group(1)}]")
    return wrong


def _cli() -> Any:
    import typer

    from kiq.cli.main import app

    return typer.main.get_command(app)


def test_defaults_written_in_the_cli_help_are_the_settings_tree_defaults(nowhere: Path) -> None:
    wrong = cli_help_disagreements(_cli())
    assert not wrong, "CLI help states defaults the settings tree does not have:\n" + "\n".join(
        wrong
    )


def test_a_cli_help_default_that_disagrees_is_caught(nowhere: Path) -> None:
    root = _cli()
    port = next(p for p in root.commands["serve"].params if p.name == "port")
    before = port.help
    try:
        port.help = "HTTP port [8081]"
        assert cli_help_disagreements(root) == ["kiq serve --port: help says [8081]"]
    finally:
        port.help = before


def test_the_http_reference_has_every_public_core_route() -> None:
    from kiq.api.routes import CORE
    from kiq.api.spec import Rule

    text = ref.http_markdown()
    for spec in CORE:
        if spec.access is not Rule.CLUSTER:
            assert f"`{spec.method} {ref_path(spec.path)}`" in text


def ref_path(path: str) -> str:
    from kiq.api.openapi import documented_path

    return documented_path(path)


def test_the_cli_reference_has_every_command() -> None:
    text = ref.cli_markdown()
    for command in ("kiq serve", "kiq up", "kiq broker start", "kiq pipeline run", "kiq new"):
        assert f"## `{command}`" in text

"""The docs site's generated references agree with the code they describe.

scripts/docs_reference.py makes the configuration, CLI and HTTP reference pages when the
site is built. Here each default the configuration reference states is read back and
compared with what a section holds when nothing is configured; and each default a flag's
help shows (kiq.cli.defaults takes it from the settings tree) with its setting's, in the
CLI reference and in what ``kiq COMMAND --help`` prints. A default a help writes by hand
(``[8080]``) that disagrees with the setting of that flag fails too.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

from kiq.cli import defaults

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
        heading = re.fullmatch(r"##+ `\[([\w.]+)\]`", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
            continue
        if current is None or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[0] in ("setting", "key"):
            header = cells
            continue
        row = dict(zip(header, cells, strict=True))
        current[row[header[0]].strip("`")] = row
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
    if isinstance(like, BaseModel):
        return type(like).model_validate(json.loads(text))
    return json.loads(text)


def test_a_table_inside_a_section_has_its_own_table_in_the_reference() -> None:
    from kiq.settings import TenantLimits

    rows = _rows(ref.configuration_markdown())["limits.tenants"]
    assert set(rows) == set(TenantLimits.model_fields)
    defaults = TenantLimits()
    for name, row in rows.items():
        assert _value(row["default"], getattr(defaults, name)) == getattr(defaults, name), name


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


def _literal(text: str) -> Any:
    """The value a hand-written default states, or None when it is prose (``port+1``)."""
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


def _cli() -> Any:
    import typer

    from kiq.cli.main import app

    return typer.main.get_command(app)


def _options(root: Any) -> Iterator[tuple[str, Any]]:
    """("kiq feed stocks", option) for every option of every command."""
    for path, command in ref._commands(root, ("kiq",)):
        for param in command.params:
            if param.param_type_name == "option":
                yield " ".join(path), param


def _tree_default(param: Any, stated: str | None = None) -> tuple[str, str] | None:
    """("[feed] rate", "500"): the setting ``param``'s help shows and its default now; of
    several settings with one help, one that says ``stated`` if any does."""
    made = sorted(
        (
            (f"[{section.table}] {name}", defaults.shown(defaults.setting_default(section, name)))
            for section, name in defaults.SHOWN.get(param.help or "", ())
        ),
        key=lambda found: found[1] != stated,
    )
    return made[0] if made else None


def cli_help_disagreements(root: Any) -> list[str]:
    """Each option whose help shows a default other than its setting's, and each option of a
    setting whose help writes a value by hand (``[8080]``) rather than take it from the tree."""
    by_flag: dict[str, list[Any]] = {}
    for section in ref.sections():
        for name, field in section.model_fields.items():
            by_flag.setdefault(ref.flag_name(section, name), []).append(ref.default_of(field))
    wrong = []
    for command, param in _options(root):
        flag = param.opts[0]
        text, stated = defaults.split_default(param.help or "")
        tree = _tree_default(param, stated)
        if tree is not None:
            if stated != tree[1]:
                wrong.append(
                    f"{command} {flag}: help says [default: {stated}], {tree[0]} is {tree[1]}"
                )
            continue
        if stated is None:
            written = re.search(r"\\?\[([^\[\]]*)\]\s*$", text)
            stated = written.group(1) if written else None
        if stated is None or flag not in by_flag or param.default is not None:
            continue
        value = _literal(stated)
        if value is not None and not any(_same(value, d) for d in by_flag[flag]):
            wrong.append(f"{command} {flag}: help says [{stated}]")
    return wrong


def help_output_disagreements(root: Any) -> list[str]:
    """Each option whose ``kiq COMMAND --help`` shows a default other than its setting's."""
    import typer.rich_utils
    from typer.testing import CliRunner

    from kiq.cli.main import app

    wrong = []
    for path, command in ref._commands(root, ("kiq",)):
        params = [p for p in command.params if p.help in defaults.SHOWN]
        if not params:
            continue
        with pytest.MonkeyPatch.context() as patch:  # one line per option: no wrapping
            patch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)
            result = CliRunner().invoke(app, [*path[1:], "--help"])
        assert result.exit_code == 0, result.output
        printed = dict(re.findall(r"^│\s+(--[\w-]+).*\[default: (.*)\]\s*│$", result.output, re.M))
        for param in params:
            flag = param.opts[0]
            setting, value = _tree_default(param, printed.get(flag)) or ("", "")
            if printed.get(flag) != value:
                wrong.append(
                    f"{' '.join(path)} --help: {flag} [default: {printed.get(flag)}], "
                    f"{setting} is {value}"
                )
    return wrong


def cli_reference_disagreements(markdown: str, root: Any) -> list[str]:
    """Each option whose default in the CLI reference ``markdown`` is not its setting's."""
    cells: dict[tuple[str, str], str] = {}
    command = ""
    for line in markdown.splitlines():
        heading = re.fullmatch(r"## `(kiq[^`]*)`", line)
        if heading:
            command = heading.group(1)
        row = re.match(r"\| `(--[\w-]+)`[^|]*\| [^|]* \| ([^|]*) \|", line)
        if row:
            cells[(command, row.group(1))] = row.group(2).strip().strip("`")
    wrong = []
    for name, param in _options(root):
        stated = cells.get((name, param.opts[0]))
        tree = _tree_default(param, stated)
        if tree is not None and stated != tree[1]:
            wrong.append(
                f"{name} {param.opts[0]}: CLI reference says {stated}, {tree[0]} is {tree[1]}"
            )
    return wrong


def test_defaults_in_the_cli_help_are_the_settings_tree_defaults(nowhere: Path) -> None:
    wrong = cli_help_disagreements(_cli())
    assert not wrong, "CLI help states defaults the settings tree does not have:\n" + "\n".join(
        wrong
    )


def test_defaults_printed_by_help_are_the_settings_tree_defaults(nowhere: Path) -> None:
    root = _cli()
    assert sum(_tree_default(p) is not None for _, p in _options(root)) > 50
    assert help_output_disagreements(root) == []


def test_defaults_in_the_cli_reference_are_the_settings_tree_defaults(nowhere: Path) -> None:
    assert cli_reference_disagreements(ref.cli_markdown(), _cli()) == []


def test_the_demo_and_the_feed_run_at_one_rate_the_tree_holds(nowhere: Path) -> None:
    from kiq import settings

    root = _cli()
    rates = {
        command: _tree_default(param)
        for command, param in _options(root)
        if param.opts[0] == "--rate" and command in ("kiq demo", "kiq feed stocks")
    }
    rate = defaults.shown(settings.load(settings.FeedSettings).rate)
    assert rates == {"kiq demo": ("[feed] rate", rate), "kiq feed stocks": ("[feed] rate", rate)}


def test_a_setting_whose_default_changes_is_caught_everywhere_it_is_shown(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kiq import settings

    root = _cli()
    markdown = ref.cli_markdown()
    monkeypatch.setattr(settings.FeedSettings.model_fields["rate"], "default", 1000.0)
    moved = "[feed] rate is 1000"
    assert cli_help_disagreements(root) == [
        f"kiq demo --rate: help says [default: 500], {moved}",
        f"kiq feed stocks --rate: help says [default: 500], {moved}",
    ]
    assert cli_reference_disagreements(markdown, root) == [
        f"kiq demo --rate: CLI reference says 500, {moved}",
        f"kiq feed stocks --rate: CLI reference says 500, {moved}",
    ]
    wrong, _ = config_disagreements(ref.configuration_markdown(), nowhere)
    assert wrong == ["[feed] rate: reference says `1000.0`"]


def test_a_default_that_help_does_not_print_is_caught(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rich reads an unescaped ``[default: X]`` as markup and prints nothing of it."""
    monkeypatch.setattr(defaults, "stating", lambda text, default: f"{text} [default: {default}]")
    wrong = help_output_disagreements(_cli())
    assert "kiq feed stocks --help: --rate [default: None], [feed] rate is 500" in wrong
    assert "kiq serve --help: --port [default: None], [serve] port is 8080" in wrong


def test_a_cli_help_default_written_by_hand_that_disagrees_is_caught(nowhere: Path) -> None:
    root = _cli()
    port = next(p for p in root.commands["serve"].params if p.name == "port")
    before = port.help
    try:
        port.help = "HTTP port [8081]"
        assert cli_help_disagreements(root) == ["kiq serve --port: help says [8081]"]
        port.help = "HTTP port \\[default: 8081]"
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

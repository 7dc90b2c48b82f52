"""The README stays a README: short, every link resolving, its code what kiq exports.

Everything else lives in the docs site (docs/, mkdocs.yml), whose strict build checks the
links of every page; this checks the one page outside it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
MAX_LINES = 250

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor GitHub and mkdocs give a heading (code marks and punctuation dropped)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = _LINK.findall(README.read_text())
    assert links, "the README links into the docs"
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (README.parent / target) if target else README
        assert path.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in _anchors(path), f"README links to {link}: no such heading"


def test_the_readme_names_the_two_setup_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text


def test_the_readme_code_parses_and_imports_only_what_kiq_exports() -> None:
    import kiq

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "kiq":
                for alias in node.names:
                    assert alias.name in kiq.__all__, f"README imports kiq.{alias.name}"

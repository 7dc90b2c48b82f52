"""One name per concept: no two module-level classes of the server side of kiq share a name.

``kiq.client`` and ``kiq.testing`` mirror the server's names on purpose (a client's
``Page`` is the page the server sent), so they stay out of the count.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "src" / "kiq"
MIRRORS = ("client", "testing")


def _module_classes(body: list[ast.stmt]) -> Iterator[str]:
    """Classes a module defines at its top level, including under ``if``/``try``/``with``."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.If | ast.With):
            yield from _module_classes(node.body)
            yield from _module_classes(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            yield from _module_classes(node.body)
            for handler in node.handlers:
                yield from _module_classes(handler.body)
            yield from _module_classes(node.orelse)
            yield from _module_classes(node.finalbody)


def _server_modules() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] not in MIRRORS:
            yield path


def class_homes() -> dict[str, list[str]]:
    """Each module-level class name -> the files (relative to ``src/kiq``) defining it."""
    homes: dict[str, list[str]] = defaultdict(list)
    for path in _server_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _module_classes(tree.body):
            homes[name].append(path.relative_to(PACKAGE).as_posix())
    return homes


def test_the_walk_sees_the_server_side():
    homes = class_homes()
    assert "Routes" in homes  # the public framework
    assert not any(f.startswith(MIRRORS) for files in homes.values() for f in files)


def test_no_two_server_classes_share_a_name():
    clashes = {name: files for name, files in class_homes().items() if len(files) > 1}
    report = "\n".join(f"  {name}: {', '.join(files)}" for name, files in sorted(clashes.items()))
    assert not clashes, f"{len(clashes)} class names are defined more than once:\n{report}"

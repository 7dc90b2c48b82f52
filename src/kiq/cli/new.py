"""`kiq new NAME`: a working application directory to start from.

It copies the shipped page-views application (``kiq.apps.pageviews``: a pipeline with
three windowed tables, its routes, a feed, its application file, a test on
``kiq.testing`` and a README) into ``NAME/``, named ``NAME``. The copy imports only
``kiq``'s public API, so it runs wherever kiq is installed: ``kiq up --config
NAME/kiq.toml`` serves it, ``python -m pytest NAME`` tests it once kiq's ``test`` extra
(pytest) is installed, which the closing message and the README say.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated

import typer

from kiq.cli.context import console, run_or_exit
from kiq.errors import ConfigError

TEMPLATE = "kiq.apps.pageviews"
FILES = ("pipeline.py", "api.py", "feed.py", "kiq.toml", "test_app.py", "README.md")
# How to run its tests, and how long they take (measured: 28-37 s with two cores, most of
# it Spark starting for the first test); the template's README says the same.
INSTALL_TEST = "pip install 'kiq[test]'"
TEST_TIME = "about half a minute"
_TEMPLATE_NAME = "pageviews"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def new(
    name: Annotated[str, typer.Argument(help="the application's name, and its directory's")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="where to write it [./NAME]")
    ] = None,
    force: Annotated[bool, typer.Option(help="write into a directory that has files")] = False,
) -> None:
    """Write a working application (pipeline, routes, feed, kiq.toml, a test) to start from."""
    target = run_or_exit(lambda: write_app(name, directory or Path(name), force=force))
    steps = [
        (INSTALL_TEST, "once: pytest, for its tests"),
        (run_tests_command(target), f"its tests, {TEST_TIME}: no broker"),
        (f"kiq up --config {target}/kiq.toml", "broker, pipeline, 3 nodes, feed"),
    ]
    width = max(len(command) for command, _ in steps)
    console.print(
        f"[green]✓[/] wrote application {name} to {target}/: {', '.join(FILES)}\n",
        highlight=False,
    )
    for command, why in steps:
        # one line each, to copy: never wrapped
        console.print(
            f"  {command.ljust(width)}    # {why}", markup=False, highlight=False, soft_wrap=True
        )


def run_tests_command(target: Path) -> str:
    """The command that runs the app's tests with the pytest of kiq's own environment (a
    bare ``pytest`` may be another one on the PATH, which has no kiq)."""
    return f"python -m pytest {target}"


def write_app(name: str, target: Path, *, force: bool = False) -> Path:
    """Copy the template into ``target`` as application ``name``; what it wrote."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"application name {name!r}: use a letter, then up to 63 of A-Z a-z 0-9 _ -"
        )
    if target.exists() and any(target.iterdir()) and not force:
        raise ConfigError(f"{target} is not empty: choose another directory, or --force")
    target.mkdir(parents=True, exist_ok=True)
    source = resources.files(TEMPLATE)
    for file in FILES:
        text = _read(source, file)
        if file == "kiq.toml":
            text = _named(text, name)
        (target / file).write_text(text, encoding="utf-8")
    return target


def _read(source: Traversable, file: str) -> str:
    return source.joinpath(file).read_text(encoding="utf-8")


def _named(text: str, name: str) -> str:
    """The application file with the app's name (and its cluster's) in place of the template's."""
    for old, new_ in (
        (f'"{_TEMPLATE_NAME}"', f'"{name}"'),
        (f'"kiq-{_TEMPLATE_NAME}"', f'"kiq-{name}"'),
    ):
        text = text.replace(old, new_)
    return text

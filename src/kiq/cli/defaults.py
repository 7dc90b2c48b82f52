"""A flag's default, as its help shows it, taken from the settings tree.

A flag that sets a setting defaults to None (not given), so that the environment and
the file can set it too; its help says what the setting is when nothing sets it.
``with_default`` writes that from the setting's field, so no default is written twice
and none can drift from the tree. The CLI reference (scripts/docs_reference.py) reads
it back out of the help (``split_default``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kiq.settings import _Section

# How a help ends with its default: ``... [default: X]``, the bracket escaped for rich.
_DEFAULT = re.compile(r"\s*\\?\[default: (?P<value>.*)\]$")

# Each help ``with_default`` made, and the settings it shows (one text may serve several
# with one default, `--bootstrap` of three commands): what tests/unit/docs/ checks --help
# and the CLI reference against.
SHOWN: dict[str, set[tuple[type[_Section], str]]] = {}


def setting_default(section: type[_Section], name: str) -> Any:
    """The value of setting ``name`` of ``section`` when nothing sets it."""
    field = section.model_fields[name]
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def shown(value: Any) -> str:
    """A default as a flag takes it: lists comma-separated, switches on or off."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def with_default(text: str, section: type[_Section], name: str) -> str:
    """``text``, then the default of setting ``name`` of ``section``: ``text [default: X]``."""
    help_text = stating(text, shown(setting_default(section, name)))
    SHOWN.setdefault(help_text, set()).add((section, name))
    return help_text


def stating(text: str, default: str) -> str:
    """``text [default: DEFAULT]``, for a default that is no one setting's value but says
    how one is derived (``port + 1``); the bracket escaped, so that rich prints it."""
    return f"{text} \\[default: {default}]"


def split_default(help_text: str) -> tuple[str, str | None]:
    """A help and the default it ends with (None when it states none)."""
    found = _DEFAULT.search(help_text)
    if found is None:
        return help_text, None
    return help_text[: found.start()], found.group("value")

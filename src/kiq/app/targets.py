"""An application's function from its target: ``module:function`` or ``file.py:function``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiq.errors import ConfigError
from kiq.targets import load


def resolve(target: str, what: str, base: str | None = None) -> Callable[..., Any]:
    """The callable ``target`` names; a ``ConfigError`` that says why when there is none.

    A relative file is looked for in ``base`` (the application file's directory)
    first, then in the working directory (``kiq.targets``).
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"{what}: {target!r} is not module:function or path/to/file.py:function")
    found = getattr(load(where, what, base), name, None)
    if not callable(found):
        raise ConfigError(f"{what}: {where} has no function {name!r}")
    return found  # type: ignore[no-any-return]

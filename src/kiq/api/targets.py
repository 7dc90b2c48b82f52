"""An application's function from its target: ``module:function`` or ``file.py:function``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kiq.errors import ConfigError


def resolve(target: str, what: str, base: str | None = None) -> Callable[..., Any]:
    """The callable ``target`` names; a ``ConfigError`` that says why when there is none.

    A file path (it ends in ``.py`` or holds a ``/``) that is relative is looked for in
    ``base`` (the application file's directory) first, then in the working directory.
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"{what}: {target!r} is not module:function or path/to/file.py:function")
    module = _from_file(where, base, what) if _is_file(where) else _from_module(where, what)
    found = getattr(module, name, None)
    if not callable(found):
        raise ConfigError(f"{what}: {where} has no function {name!r}")
    return found  # type: ignore[no-any-return]


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _from_module(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import {name}: {exc}") from exc


def _from_file(where: str, base: str | None, what: str) -> ModuleType:
    path = Path(where)
    candidates = [path] if path.is_absolute() else [Path(base or ".") / path, path]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        tried = ", ".join(str(p) for p in dict.fromkeys(candidates))
        raise ConfigError(f"{what}: no file {where} (looked at {tried})")
    found = found.resolve()
    name = f"kiq_app_{found.stem}_{abs(hash(str(found))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, found)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{what}: {found} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"{what}: {found} failed to load: {exc!r}") from exc
    return module

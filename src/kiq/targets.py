"""Loading what a target names: ``package.module:function`` or ``path/to/file.py:function``.

The one loader behind pipeline targets (``kiq pipeline run``) and an application's
endpoints (``[app] endpoints``); each caller checks the syntax and the function
it expects, and words its errors with ``what`` (which target, for what).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from kiq.errors import ConfigError


def is_file(where: str) -> bool:
    """True when the part before the colon names a file rather than a module."""
    return where.endswith(".py") or "/" in where or "\\" in where


def load(where: str, what: str, base: str | None = None) -> ModuleType:
    """The module ``where`` names; a ``ConfigError`` saying why when it cannot be had.

    A relative file is looked for in ``base`` (an application file's directory)
    first, then in the working directory.
    """
    return _from_file(where, what, base) if is_file(where) else _from_module(where, what)


def _from_module(module: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ConfigError(
                f"{what}: cannot import {module}: no module {module!r} (is its package "
                "installed, or did you mean a file, path/to/file.py:function?)"
            ) from exc
        raise ConfigError(f"{what}: {module} failed to import:\n{_last(exc)}") from exc
    except Exception as exc:
        raise ConfigError(f"{what}: {module} failed to import:\n{_last(exc)}") from exc


def _from_file(where: str, what: str, base: str | None) -> ModuleType:
    path = Path(where)
    candidates = [path] if path.is_absolute() else [Path(base or ".") / path, path]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        tried = ", ".join(str(p) for p in dict.fromkeys(candidates))
        raise ConfigError(f"{what}: no file {where} (looked at {tried})")
    found = found.resolve()
    name = f"kiq_target_{found.stem}_{abs(hash(str(found))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, found)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{what}: {found} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    # Its sibling modules import as they would when the file runs as a script.
    if str(found.parent) not in sys.path:
        sys.path.insert(0, str(found.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"{what}: {found} failed to import:\n{_last(exc)}") from exc
    return module


def _last(exc: BaseException) -> str:
    """The error and where it was raised, without the import machinery's frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "importlib" not in f.filename]
    where = f"  {mine[-1].filename}:{mine[-1].lineno}\n" if mine else ""
    return f"{where}  {type(exc).__name__}: {exc}"

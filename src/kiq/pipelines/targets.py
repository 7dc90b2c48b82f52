"""Pipeline targets: ``path/to/file.py:function``, ``package.module:function``, or the
name of a pipeline kiq ships, resolved and checked before Spark starts.

A target's name is its checkpoint directory under the checkpoint root: the file's stem
or the module's path, a dot, the function (``bookings.build``); a shipped pipeline keeps
its short name (``stocks``) however it is written, so its checkpoints survive.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiq import catalog
from kiq.errors import ConfigError

SHIPPED = {
    catalog.STOCKS_PIPELINE: "kiq.apps.stocks.pipeline:build",
    catalog.WORDCOUNT_PIPELINE: "kiq.apps.wordcount.pipeline:build",
}
_SYNTAX = "path/to/file.py:function or package.module:function"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Target:
    name: str  # its checkpoint directory, and its name in logs
    spec: str
    function: Callable[[Any], object]


def resolve(text: str) -> Target:
    """The function ``text`` names, imported and checked to take one argument (``ctx``)."""
    spec = SHIPPED.get(text, text)
    where, colon, attr = spec.rpartition(":")
    if not colon or not where or not attr.isidentifier():
        raise ConfigError(
            f"pipeline target {text!r}: expected {_SYNTAX}, or one of {', '.join(SHIPPED)}"
        )
    if where.endswith(".py") or "/" in where or "\\" in where:
        module, stem = _load_file(Path(where), text), Path(where).stem
    else:
        module, stem = _import(where, text), where
    function = getattr(module, attr, None)
    if function is None or not callable(function):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v))
        raise ConfigError(
            f"pipeline target {text!r}: {where} has no function {attr!r}"
            + (f" (its functions: {', '.join(found)})" if found else "")
        )
    _check_signature(function, text)
    shipped = {v: k for k, v in SHIPPED.items()}
    name = shipped.get(spec) or _UNSAFE.sub("_", f"{stem}.{attr}")
    return Target(name, spec, function)


def _load_file(path: Path, text: str) -> Any:
    if not path.is_file():
        raise ConfigError(f"pipeline target {text!r}: no file {path}")
    name = f"kiq_pipeline_{_UNSAFE.sub('_', path.stem)}"
    loader = importlib.util.spec_from_file_location(name, path)
    if loader is None or loader.loader is None:
        raise ConfigError(f"pipeline target {text!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(loader)
    # Its sibling modules import as they would when the file runs as a script.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(
            f"pipeline target {text!r}: {path} failed to import:\n{_last(exc)}"
        ) from exc
    return module


def _import(module: str, text: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ConfigError(
                f"pipeline target {text!r}: no module {module!r} (is its package installed, "
                f"or did you mean a file, {_SYNTAX}?)"
            ) from exc
        raise ConfigError(
            f"pipeline target {text!r}: {module} failed to import:\n{_last(exc)}"
        ) from exc
    except Exception as exc:
        raise ConfigError(
            f"pipeline target {text!r}: {module} failed to import:\n{_last(exc)}"
        ) from exc


def _check_signature(function: Callable[..., object], text: str) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check
    try:
        signature.bind(object())
    except TypeError:
        raise ConfigError(
            f"pipeline target {text!r}: {getattr(function, '__name__', function)}{signature} "
            "must take exactly one argument, the pipeline context: def build(ctx): ..."
        ) from None


def _last(exc: BaseException) -> str:
    """The error and where it was raised, without the import machinery's frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "importlib" not in f.filename]
    where = f"  {mine[-1].filename}:{mine[-1].lineno}\n" if mine else ""
    return f"{where}  {type(exc).__name__}: {exc}"

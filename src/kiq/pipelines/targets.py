"""Pipeline targets: ``path/to/file.py:function``, ``package.module:function``, or the
name of a pipeline kiq ships, resolved and checked before Spark starts.

A target's name is its checkpoint directory under the checkpoint root: the file's stem
or the module's path, a dot, the function (``bookings.build``); a shipped pipeline keeps
its short name (``stocks``) however it is written, so its checkpoints survive.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kiq import catalog
from kiq.errors import ConfigError
from kiq.targets import is_file, load

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
    module = load(where, f"pipeline target {text!r}")
    if is_file(where):
        _ship_by_value(module)
    function = getattr(module, attr, None)
    if function is None or not callable(function):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v))
        raise ConfigError(
            f"pipeline target {text!r}: {where} has no function {attr!r}"
            + (f" (its functions: {', '.join(found)})" if found else "")
        )
    _check_signature(function, text)
    return Target(target_name(text), spec, function)


def of_function(function: Callable[[Any], object]) -> Target:
    """A function given itself (``kiq.pipelines.start``): named as its file's target would
    be (``job.build`` for ``build`` in job.py), so its checkpoints are the same whichever
    way it is given."""
    if not callable(function):
        raise ConfigError(f"pipeline {function!r}: expected a function build(ctx) or a target")
    attr = getattr(function, "__name__", "build")
    module_name = getattr(function, "__module__", None) or ""
    if module_name == "__main__":
        where = getattr(sys.modules.get(module_name), "__file__", None)
        stem = Path(where).stem if where else ""
    else:
        stem = module_name
    _check_signature(function, attr)
    name = _UNSAFE.sub("_", f"{stem}.{attr}" if stem else attr)
    return Target(name, f"{stem or '<function>'}:{attr}", function)


def target_name(text: str) -> str:
    """The name of target ``text`` (its checkpoint directory), without importing it."""
    spec = SHIPPED.get(text, text)
    where, _, attr = spec.rpartition(":")
    shipped = {v: k for k, v in SHIPPED.items()}
    stem = Path(where).stem if is_file(where) else where
    return shipped.get(spec) or _UNSAFE.sub("_", f"{stem}.{attr}")


def _ship_by_value(module: ModuleType) -> None:
    """A file's module has a name of kiq's making that Spark's Python workers cannot import:
    the functions it defines (a UDF, a ``foreach`` writer) travel to them by value."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


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

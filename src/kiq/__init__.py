"""kiq: PySpark-derived tables and Kafka topics, answerable by key from any node.

The public API is what this module exports (``__all__``); everything else is kiq's
own. Names load on first use, so ``import kiq`` stays cheap (no pyspark, no web stack).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiq.pipelines.context import Context

# public name -> the module that defines it
_EXPORTS = {
    # pipelines: `kiq pipeline run FILE.py:function` calls function(ctx)
    "Context": "kiq.pipelines.context",
}

__all__ = ["Context"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kiq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""kiq: Kafka topics and Spark-derived tables, answerable by key from any node.

The public API is what this package exports (``from kiq import ...``), each name
documented in docs/api.md; everything else is kiq's own. Names are imported when
first used, so ``import kiq`` stays cheap (no Starlette, no PySpark) and its layers
stay as pyproject.toml draws them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Pipelines: `kiq pipeline run FILE.py:function` calls function(ctx).
_PIPELINES = {
    "Context": "kiq.pipelines.context",
}

# Custom endpoints: an application's own HTTP routes (kiq.api.endpoints).
_ENDPOINTS = {
    "MAX_RANGE_LIMIT": "kiq.api.endpoints",
    "Many": "kiq.api.results",
    "Page": "kiq.api.results",
    "Principal": "kiq.api.principal",
    "Read": "kiq.api.results",
    "Reply": "kiq.api.endpoints",
    "Request": "kiq.api.endpoints",
    "Routes": "kiq.api.endpoints",
    "Served": "kiq.api.results",
    "Tables": "kiq.api.endpoints",
    "Windows": "kiq.api.results",
    "json_reply": "kiq.api.endpoints",
    # Live updates: Tables.watch gives a Watch of Changes; event_stream sends ServerEvents.
    "Change": "kiq.api.streams",
    "ServerEvent": "kiq.api.streams",
    "Watch": "kiq.api.streams",
    "event_stream": "kiq.api.endpoints",
}

# Errors a handler raises (each becomes its HTTP status) or catches (docs/api.md says which).
_ERRORS = {
    "KiqError": "kiq.errors",
    "WriteFailed": "kiq.errors",
    "ApiError": "kiq.api.errors",
    "BadRequest": "kiq.api.errors",
    "KeyNotFound": "kiq.api.errors",
    "Unavailable": "kiq.api.errors",
    "UnknownTable": "kiq.api.errors",
}

# public name -> the module that defines it
_EXPORTS = {**_PIPELINES, **_ENDPOINTS, **_ERRORS}

__all__ = [
    "MAX_RANGE_LIMIT",
    "ApiError",
    "BadRequest",
    "Change",
    "Context",
    "KeyNotFound",
    "KiqError",
    "Many",
    "Page",
    "Principal",
    "Read",
    "Reply",
    "Request",
    "Routes",
    "Served",
    "ServerEvent",
    "Tables",
    "Unavailable",
    "UnknownTable",
    "Watch",
    "Windows",
    "WriteFailed",
    "event_stream",
    "json_reply",
]

if TYPE_CHECKING:
    from kiq.api.endpoints import (
        MAX_RANGE_LIMIT,
        Reply,
        Request,
        Routes,
        Tables,
        event_stream,
        json_reply,
    )
    from kiq.api.errors import ApiError, BadRequest, KeyNotFound, Unavailable, UnknownTable
    from kiq.api.principal import Principal
    from kiq.api.results import Many, Page, Read, Served, Windows
    from kiq.api.streams import Change, ServerEvent, Watch
    from kiq.errors import KiqError, WriteFailed
    from kiq.pipelines.context import Context


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kiq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

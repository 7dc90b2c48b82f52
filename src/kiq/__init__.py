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
    "Context": "kiq.app.context",
}

# Custom endpoints: an application's own HTTP routes (kiq.app.endpoints).
_ENDPOINTS = {
    "MAX_RANGE_LIMIT": "kiq.app.endpoints",
    "Many": "kiq.app.results",
    "Page": "kiq.app.results",
    "Principal": "kiq.app.principal",
    "Read": "kiq.app.results",
    "Reply": "kiq.app.endpoints",
    "Request": "kiq.app.endpoints",
    "Routes": "kiq.app.endpoints",
    "Served": "kiq.app.results",
    "Tables": "kiq.app.endpoints",
    "Windows": "kiq.app.results",
    "json_reply": "kiq.app.endpoints",
    # Live updates: Tables.watch gives a Watch of Changes; event_stream sends ServerEvents.
    "Change": "kiq.app.streams",
    "ServerEvent": "kiq.app.streams",
    "Watch": "kiq.app.streams",
    "event_stream": "kiq.app.endpoints",
}

# Errors a handler raises (each becomes its HTTP status) or catches (docs/api.md says which).
_ERRORS = {
    "KiqError": "kiq.app.errors",
    "WriteFailed": "kiq.app.errors",
    "ApiError": "kiq.app.errors",
    "BadRequest": "kiq.app.errors",
    "KeyNotFound": "kiq.app.errors",
    "Unavailable": "kiq.app.errors",
    "UnknownTable": "kiq.app.errors",
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
    from kiq.app.context import Context
    from kiq.app.endpoints import (
        MAX_RANGE_LIMIT,
        Reply,
        Request,
        Routes,
        Tables,
        event_stream,
        json_reply,
    )
    from kiq.app.errors import (
        ApiError,
        BadRequest,
        KeyNotFound,
        KiqError,
        Unavailable,
        UnknownTable,
        WriteFailed,
    )
    from kiq.app.principal import Principal
    from kiq.app.results import Many, Page, Read, Served, Windows
    from kiq.app.streams import Change, ServerEvent, Watch


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kiq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""PySpark Structured Streaming pipelines that derive kiq's tables from Kafka topics.

A pipeline is a function given a ``Context`` (``kiq.Context``). `kiq pipeline run` runs
targets in a Spark session of its own (``runner``, ``session``); an application with its
own session (``spark-submit``, a notebook) calls ``start`` or ``run`` (``entry``), which
do the same on that session. Names are imported when first used: importing this package
starts no Spark and no Kafka client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiq.pipelines.entry import run, session_conf, start
    from kiq.pipelines.running import Pipelines
    from kiq.pipelines.session import build_session, checkpoint_for, spark_conf
    from kiq.runtime.pipeline_errors import PipelineFailed

_PUBLIC = {
    "start": "kiq.pipelines.entry",
    "run": "kiq.pipelines.entry",
    "session_conf": "kiq.pipelines.entry",
    "Pipelines": "kiq.pipelines.running",
    "PipelineFailed": "kiq.runtime.pipeline_errors",
    "build_session": "kiq.pipelines.session",
    "checkpoint_for": "kiq.pipelines.session",
    "spark_conf": "kiq.pipelines.session",
}

__all__ = [
    "PipelineFailed",
    "Pipelines",
    "build_session",
    "checkpoint_for",
    "run",
    "session_conf",
    "spark_conf",
    "start",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'kiq.pipelines' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

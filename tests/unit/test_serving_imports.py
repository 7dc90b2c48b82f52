"""A serving process loads what serves, not the local launcher nor Spark.

`kiq serve`, a node's read workers and `kiq proxy` each start in a fresh interpreter here,
importing what their process imports on its way to serving; afterwards no module of the
launcher (``kiq.runtime``'s broker, nodes, pipelines, spark_cluster, jars, ...), of the
Spark pipelines or of PySpark may be loaded. The ``serving-no-launcher`` contract in
pyproject.toml says the same of the import graph; this sees what a process really loads,
through ``kiq``'s entry point and its lazy imports too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import kiq

# Of kiq.runtime, a serving process uses these: the stop signals, the port check, and the
# one door its read workers start through. Any other module of it is the launcher's.
SERVING_RUNTIME = {
    "kiq.runtime",
    "kiq.runtime.signals",
    "kiq.runtime.ports",
    "kiq.runtime.processes",
}
NEVER = ("kiq.pipelines", "kiq.bench", "kiq.testing", "pyspark", "py4j")

# `from kiq import ...` as a served application's endpoints use it; ``Context`` is the
# pipelines' (a Spark driver's), never imported where a node serves.
SERVED_API = sorted(set(kiq.__all__) - {"Context"})

PROCESSES = {
    # `kiq serve`: the entry point, the command, the node and its read workers' side, the
    # shipped applications' endpoints (the defaults of `kiq up`'s nodes).
    "kiq serve": [
        "kiq.cli.main",
        "kiq.cli.serve",
        "kiq.node_build",
        "kiq.runtime.ports",
        "kiq.runtime.signals",
        "kiq.workers.home",
        "kiq.workers.server",
        "kiq.apps.stocks.api",
        "kiq.apps.wordcount.api",
        "kiq.apps.pageviews.api",
    ],
    # A read worker: `python -m kiq.workers` runs kiq.workers.main.
    "read worker": ["kiq.workers", "kiq.workers.main"],
    "kiq proxy": ["kiq.cli.main", "kiq.cli.proxy", "kiq.proxy"],
}


def _loaded_after(modules: list[str]) -> list[str]:
    """The modules a fresh interpreter holds once it has imported ``modules`` and looked up
    every served public name."""
    code = (
        "import importlib, json, sys, kiq\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"for name in {SERVED_API!r}:\n"
        "    getattr(kiq, name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def _launcher_or_spark(loaded: list[str]) -> list[str]:
    return [
        m
        for m in loaded
        if (m.startswith("kiq.runtime.") and m not in SERVING_RUNTIME)
        or any(m == n or m.startswith(n + ".") for n in NEVER)
    ]


@pytest.mark.parametrize("process", sorted(PROCESSES))
def test_a_serving_process_loads_neither_the_launcher_nor_spark(process: str):
    loaded = _loaded_after(PROCESSES[process])
    assert set(PROCESSES[process]) <= set(loaded)
    assert _launcher_or_spark(loaded) == []


def test_the_check_sees_the_launcher_and_spark():
    loaded = _loaded_after(["kiq.runtime.nodes", "kiq.pipelines.session"])
    found = _launcher_or_spark(loaded)
    assert "kiq.runtime.nodes" in found
    assert "kiq.pipelines.session" in found
    assert "kiq.runtime.processes" not in found

"""A pipeline file's own Python functions run in Spark's Python workers: a UDF defined in
``pipeline.py`` (loaded under a module name of kiq's making) reaches the worker by value."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from kiq.pipelines.targets import resolve

pytestmark = pytest.mark.integration

PIPELINE = """
from pyspark.sql.functions import udf


def loud(word):
    return word.upper() + "!"


# The function stays a module attribute of its own: pickled by reference unless kiq says
# otherwise, and the workers cannot import the module it names.
shout = udf(loud, "string")


def build(ctx):
    pass
"""


def test_a_udf_defined_in_a_pipeline_file_runs_in_the_workers(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import col

    (tmp_path / "shouting.py").write_text(textwrap.dedent(PIPELINE))
    target = resolve(f"{tmp_path / 'shouting.py'}:build")
    shout = target.function.__globals__["shout"]
    words = spark.createDataFrame([("ada",), ("bob",)], "word string")
    got = sorted(r[0] for r in words.select(shout(col("word"))).collect())
    assert got == ["ADA!", "BOB!"]

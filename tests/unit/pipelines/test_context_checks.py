"""The checks kiq makes before a query starts, and `kiq pipeline run`'s own errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.errors import ConfigError, SetupError
from kiq.pipelines.context import Context, _key
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.tables import TableOutput

runner = CliRunner()


def ctx(jar: Path | None = None) -> Context:
    opts = StreamOptions(bootstrap="127.0.0.1:1", checkpoint_root="/tmp/ck")
    return Context(spark=None, opts=opts, pipeline="p", partitioner_jar=jar)  # type: ignore[arg-type]


def test_a_missing_key_or_value_column_is_named_with_the_columns_there_are():
    with pytest.raises(ConfigError, match=r"no column 'when' .*\(its columns: who, n\)"):
        TableOutput("t", "t", ("who", "when")).check(["who", "n"])
    with pytest.raises(ConfigError, match="no column 'v'"):
        TableOutput("t", "t", ("who",), value="v").check(["who", "n"])
    TableOutput("t", "t", ("who", "n")).check(["who", "n"])


def test_a_composite_key_needs_a_one_character_separator():
    with pytest.raises(ConfigError, match="sep must be one character"):
        TableOutput("t", "t", ("a", "b"), sep="::").check(["a", "b"])
    TableOutput("t", "t", ("a",), sep="::").check(["a"])  # one column: no separator at all


def test_keys_are_a_column_or_a_sequence_of_them():
    assert _key("a") == ("a",) and _key(["a", "b"]) == ("a", "b")
    for bad in ((), ("a", 1)):
        with pytest.raises(ConfigError, match="key must be a column name"):
            _key(bad)  # type: ignore[arg-type]


def test_two_queries_with_one_name_are_refused():
    c = ctx()
    c._claim("totals")
    with pytest.raises(ConfigError, match="writes 'totals' twice"):
        c._claim("totals")


def test_composite_keys_set_the_partitioner_per_topic(tmp_path: Path):
    jar = tmp_path / "kiq-partitioner.jar"
    options = ctx(jar)._partitioner(
        [TableOutput("a", "ta", ("x", "y"), "|"), TableOutput("b", "tb", ("x",))]
    )
    assert options == {
        "kafka.partitioner.class": "io.kiq.kafka.KeyPrefixPartitioner",
        "kafka.kiq.key.separator.ta": "|",
    }
    assert ctx(jar)._partitioner([TableOutput("b", "tb", ("x",))]) == {}
    with pytest.raises(SetupError, match="make jars"):
        ctx(None)._partitioner([TableOutput("a", "ta", ("x", "y"))])


def test_run_without_targets_takes_the_app_files_pipelines(tmp_path: Path):
    config = tmp_path / "kiq.toml"
    config.write_text('[app]\npipelines = ["nowhere.py:build"]\n')
    result = runner.invoke(app, ["--config", str(config), "pipeline", "run"])
    # A relative file in the application file is beside that file, wherever kiq runs.
    output = result.output.replace("\n", "")
    assert result.exit_code == 1 and f"no file {tmp_path / 'nowhere.py'}" in output
    config.write_text("[app]\n")
    result = runner.invoke(app, ["--config", str(config), "pipeline", "run"])
    assert result.exit_code == 1 and "[app] pipelines" in result.output


def test_a_bad_target_fails_before_spark_starts(tmp_path: Path):
    f = tmp_path / "p.py"
    f.write_text("def build():\n    pass\n")
    result = runner.invoke(app, ["pipeline", "run", f"{f}:build"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    # the console wraps long lines, where a long temporary path pushes the words
    assert "must take exactly one argument" in " ".join(result.output.split())

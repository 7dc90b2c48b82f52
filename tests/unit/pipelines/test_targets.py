"""Resolving `kiq pipeline run` targets: clear errors before Spark starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kiq.errors import ConfigError
from kiq.pipelines.targets import SHIPPED, resolve


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_file_target_and_its_checkpoint_name(tmp_path: Path):
    f = write(tmp_path / "orders.py", "def build(ctx):\n    return ctx\n")
    target = resolve(f"{f}:build")
    assert target.name == "orders.build"
    assert target.function("ctx") == "ctx"


def test_a_module_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write(tmp_path / "mypipes_mod.py", "def build(ctx, extra=1):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = resolve("mypipes_mod:build")
    assert target.name == "mypipes_mod.build" and target.spec == "mypipes_mod:build"
    sys.modules.pop("mypipes_mod", None)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_names_keep_their_checkpoint_names(name: str):
    assert resolve(name).name == name
    assert resolve(SHIPPED[name]).name == name  # however it is written


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        ("def build(ctx):\n    pass\n", "nope.py:build", "no file"),
        ("def build(ctx):\n    pass\n", "{f}", "expected path/to/file.py:function"),
        ("def build(ctx):\n    pass\n", "{f}:", "expected path/to/file.py:function"),
        (
            "def build(ctx):\n    pass\n",
            "{f}:other",
            "has no function 'other' (its functions: build)",
        ),
        ("def build():\n    pass\n", "{f}:build", "must take exactly one argument"),
        ("def build(ctx, spark):\n    pass\n", "{f}:build", "must take exactly one argument"),
        ("build = 3\n", "{f}:build", "has no function 'build'"),
        ("import not_a_module_anywhere\n", "{f}:build", "ModuleNotFoundError"),
        ("def build(ctx):\n    pass\n1/0\n", "{f}:build", "ZeroDivisionError"),
    ],
)
def test_bad_targets_say_what_is_wrong(tmp_path: Path, source: str, target: str, message: str):
    f = write(tmp_path / "pipe.py", source)
    with pytest.raises(ConfigError) as err:
        resolve(target.format(f=f))
    assert message in str(err.value)


def test_a_missing_module_is_named():
    with pytest.raises(ConfigError, match=r"no module 'no_such_pkg\.pipes'"):
        resolve("no_such_pkg.pipes:build")

"""The kiq.testing examples of docs/api.md and docs/guides/pipelines.md, run as a user's tests.

Each block is copied out of its document into a file, imported, and its ``test_``
functions called (the guide's beside the guide's own orders_pipeline.py): what the
documents show passes.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"

pytestmark = pytest.mark.spark


def doc_example() -> str:
    text = API_DOC.read_text()
    marker = text.index("<!-- example: test_orders.py")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block is not None
    return block.group(1)


def test_the_testing_example_in_the_api_doc_passes(tmp_path: Path):
    path = tmp_path / "test_orders.py"
    path.write_text(doc_example())
    spec = importlib.util.spec_from_file_location("kiq_doc_test_orders", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [name for name in vars(module) if name.startswith("test_")]
    assert len(tests) == 2
    for name in tests:
        getattr(module, name)()


GUIDE = API_DOC.parent / "guides" / "pipelines.md"


def guide_block(marker: str) -> str:
    text = GUIDE.read_text()
    block = re.search(r"```python\n(.*?)```", text[text.index(marker) :], re.S)
    assert block is not None
    return block.group(1)


def test_the_pipelines_guide_test_of_its_pipeline_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "orders_pipeline.py").write_text(guide_block("<!-- example: orders_pipeline.py"))
    test = tmp_path / "test_orders_pipeline.py"
    test.write_text(guide_block("<!-- example: test_orders_pipeline.py"))
    monkeypatch.syspath_prepend(str(tmp_path))  # as pytest puts a test's directory first
    monkeypatch.delitem(sys.modules, "orders_pipeline", raising=False)
    spec = importlib.util.spec_from_file_location("kiq_guide_test_orders_pipeline", test)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_orders_make_totals_and_bad_orders_dead_letters()

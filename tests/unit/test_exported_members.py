"""`from kiq import ...` is the public API: exactly these names, and importing kiq stays cheap."""

from __future__ import annotations

import subprocess
import sys

import kiq

PUBLIC = {"Context"}


def test_exported_names_are_the_public_api():
    assert set(kiq.__all__) == PUBLIC
    assert kiq.__all__ == sorted(kiq.__all__)
    for name in kiq.__all__:
        assert getattr(kiq, name).__module__.startswith("kiq."), name


def test_import_kiq_loads_no_pyspark_and_no_web_stack():
    code = "import sys, kiq; print(sorted(m for m in ('pyspark', 'starlette') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

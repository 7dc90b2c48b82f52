"""The public API is exactly what `kiq` exports; importing kiq stays cheap."""

from __future__ import annotations

import subprocess
import sys

import kiq

ENDPOINTS = {
    "MAX_RANGE_LIMIT",
    "ApiError",
    "BadRequest",
    "KeyNotFound",
    "Many",
    "Page",
    "Reply",
    "Request",
    "Routes",
    "Tables",
    "Unavailable",
    "UnknownTable",
    "WriteFailed",
    "json_reply",
}
APPLICATION = {"AppSettings"}
PIPELINES = {"Context"}


def test_the_exported_names_are_the_public_api():
    assert kiq.__all__ == sorted(kiq.__all__, key=lambda n: (not n.isupper(), n))
    assert set(kiq.__all__) == ENDPOINTS | APPLICATION | PIPELINES
    for name in kiq.__all__:
        assert getattr(kiq, name) is not None
        assert name in dir(kiq)


def test_importing_kiq_imports_neither_starlette_nor_pyspark():
    code = (
        "import sys, kiq\nprint({m.split('.')[0] for m in sys.modules} & {'starlette', 'pyspark'})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"

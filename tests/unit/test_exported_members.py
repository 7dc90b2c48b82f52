"""The public API is exactly what `kiq` exports; importing kiq stays cheap."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kiq
from kiq.errors import KiqError

PIPELINES = {"Context"}
ENDPOINTS = {
    "MAX_RANGE_LIMIT",
    "Many",
    "Page",
    "Principal",
    "Read",
    "Reply",
    "Request",
    "Routes",
    "Served",
    "Tables",
    "Windows",
    "json_reply",
    # live updates
    "Change",
    "ServerEvent",
    "Watch",
    "event_stream",
}
ERRORS = {
    "KiqError",
    "WriteFailed",
    "ApiError",
    "BadRequest",
    "KeyNotFound",
    "Unavailable",
    "UnknownTable",
}
PUBLIC = PIPELINES | ENDPOINTS | ERRORS
API_DOC = Path(__file__).parents[2] / "docs" / "api.md"


def test_the_exported_names_are_the_public_api():
    assert kiq.__all__ == sorted(kiq.__all__, key=lambda n: (not n.isupper(), n))
    assert set(kiq.__all__) == PUBLIC
    for name in kiq.__all__:
        assert getattr(kiq, name) is not None
        assert name in dir(kiq)


def test_importing_kiq_imports_neither_starlette_nor_pyspark():
    code = (
        "import sys, kiq\nprint({m.split('.')[0] for m in sys.modules} & {'starlette', 'pyspark'})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"


def test_every_exported_error_is_a_kiq_error():
    for name in ERRORS:
        error = getattr(kiq, name)
        assert issubclass(error, KiqError), name


def test_every_public_name_has_its_section_in_the_api_doc():
    headings = re.findall(r"^#{3} `([A-Za-z_]+)", API_DOC.read_text(), re.MULTILINE)
    assert sorted(headings) == sorted(PUBLIC)

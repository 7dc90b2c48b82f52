"""One HTTP client: no kiq module makes requests with its own HTTP library, but the one
client module, the public client (and kiq.testing, which mirrors it), and the benchmarks.
The peer pool (kiq.routing) speaks HTTP itself, for speed, with no client library."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "kiq"
LIBRARIES = ("httpx", "aiohttp", "urllib.request")
ALLOWED = ("http_client.py", "client/", "testing/", "bench/")


def client_imports(source: str) -> list[str]:
    """The HTTP client libraries ``source`` imports, wherever (a function, TYPE_CHECKING)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if any(n == lib or n.startswith(lib + ".") for lib in LIBRARIES)]
    return found


def test_only_the_one_client_module_and_the_allowed_packages_import_an_http_client():
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith(ALLOWED):
            continue
        if found := client_imports(path.read_text(encoding="utf-8")):
            offenders[relative] = found
    assert offenders == {}, "use kiq.http_client instead"
    assert client_imports((SRC / "http_client.py").read_text(encoding="utf-8")) == ["httpx"]


def test_every_way_of_importing_a_client_is_seen():
    source = """
import json, httpx
from urllib.parse import quote
from urllib import request
import urllib.request as r
from aiohttp import web
def f():
    from httpx import AsyncClient
if False:
    import httpx._client
"""
    assert client_imports(source) == [
        "httpx",
        "urllib.request",
        "urllib.request",
        "aiohttp",
        "aiohttp.web",
        "httpx",
        "httpx.AsyncClient",
        "httpx._client",
    ]

"""kiq.client's public names are exactly its API, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import kiq.client
from kiq.client import ClientError
from kiq.errors import KiqError

ERRORS = {
    "AuthError",
    "BadRequest",
    "ClientError",
    "Forbidden",
    "KeyNotFound",
    "NotFound",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "UnknownTable",
}
PUBLIC = ERRORS | {
    "AsyncClient",
    "Change",
    "Client",
    "Item",
    "Lookup",
    "Many",
    "Page",
    "RetryPolicy",
    "Window",
}


def test_the_exported_names_are_the_client_api():
    assert kiq.client.__all__ == sorted(kiq.client.__all__)
    assert set(kiq.client.__all__) == PUBLIC


def test_every_error_is_a_client_error_and_a_kiq_error():
    for name in ERRORS:
        error = getattr(kiq.client, name)
        assert issubclass(error, ClientError) and issubclass(error, KiqError), name


def test_importing_the_client_brings_nothing_of_the_serving_side():
    heavy = {"starlette", "pyspark", "confluent_kafka", "rocksdict", "granian", "typer"}
    code = f"import sys, kiq.client\nprint({{m.split('.')[0] for m in sys.modules}} & {heavy})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"

"""What a read worker answers itself, and what it hands to its node."""

from __future__ import annotations

import pytest

from kiq.workers.app import answers_here


def scope(method: str, path: str, *headers: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/tables/quotes/keys/AAPL"),
        ("GET", "/v1/tables/bars/keys/AAPL/windows"),
        ("POST", "/v1/tables/quotes/multiget"),
        ("GET", "/v1/tables/quotes/range"),
        ("GET", "/v1/tables/quotes/top"),
        ("GET", "/v1/stocks/AAPL"),  # the application's own routes
        ("POST", "/v1/bookings"),
    ],
)
def test_reads_of_the_tables_and_the_applications_routes_are_answered_here(method, path):
    assert answers_here(scope(method, path))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/tables/quotes/keys/AAPL/watch"),
        ("GET", "/v1/tables/quotes/watch"),
        ("POST", "/v1/tables/quotes/watch"),
        ("GET", "/v1/tables/quotes/versions"),
        ("POST", "/v1/tables/quotes/switch"),
        ("GET", "/v1/tables"),
        ("GET", "/v1/status"),
        ("GET", "/v1/metadata"),
        ("GET", "/metrics"),
        ("GET", "/v1/health/ready"),
        ("GET", "/v1/health/live"),  # the worker answers it itself, before this check
        ("POST", "/v1/internal/lookups"),
        ("GET", "/openapi.json"),
    ],
)
def test_what_needs_the_node_goes_to_it(method, path):
    assert not answers_here(scope(method, path))


def test_a_lookup_another_node_forwarded_goes_to_the_node():
    forwarded = scope("GET", "/v1/tables/quotes/keys/AAPL", (b"x-kiq-forwarded", b"n2"))
    assert not answers_here(forwarded)


@pytest.mark.parametrize("path", ["multiget", "range", "top", "keys/AAPL/windows"])
def test_a_read_as_of_a_batch_goes_to_the_node(path):
    asked = scope("GET", f"/v1/tables/quotes/{path}")
    assert answers_here(asked)
    assert not answers_here({**asked, "query_string": b"limit=5&consistent=batch"})


@pytest.mark.parametrize(
    "path",
    ["/v1/tables/hotels/by/city", "/v1/tables/hotels/by/city/Paris", "/v1/tables/h/by/p/a/b"],
)
def test_an_index_read_is_answered_here_as_top_is(path):
    assert answers_here(scope("GET", path))
    assert not answers_here({**scope("GET", path), "query_string": b"consistent=batch"})


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/tables/hotels/by/city"),
        ("GET", "/v1/tables/hotels/by"),
        ("GET", "/v1/tables/by/by/"),
    ],
)
def test_what_only_looks_like_an_index_read_goes_to_the_node(method, path):
    assert not answers_here(scope(method, path))

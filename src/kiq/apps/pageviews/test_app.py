"""The application's tests: its pipeline over a few views, and its routes over what it made.

``pytest`` in this directory runs them in seconds, with no broker and no stream
(``kiq.testing``: a local Spark batch through the same ``ctx`` as ``kiq pipeline run``,
and one kiq node in process serving the tables it computed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiq.testing import TestClient, caller, run_pipeline

HERE = Path(__file__).parent
PIPELINE = f"{HERE / 'pipeline.py'}:build"
ROUTES = f"{HERE / 'api.py'}:routes"

T0 = 1795600800000  # 2026-11-25T10:00:00Z, in epoch milliseconds
MINUTE = 60_000


def view(user: str, page: str, country: str, at_ms: int) -> tuple[str, dict[str, Any]]:
    """One page view as the feed sends it: keyed by visitor."""
    return user, {"user": user, "page": page, "country": country, "ts": at_ms}


VIEWS = [
    view("u-001", "/pricing", "DE", T0),
    view("u-002", "/pricing", "FR", T0 + 10_000),
    view("u-001", "/pricing", "DE", T0 + 20_000),
    view("u-001", "/docs", "DE", T0 + MINUTE + 5_000),
    view("u-002", "/pricing", "FR", T0 + 2 * MINUTE),
    view("u-003", "pricing", "US", T0),  # not a path: a dead letter
    view("u-003", "/", "USA", T0),  # not a two-letter country: a dead letter
]


def test_the_pipeline_counts_views_per_window() -> None:
    run = run_pipeline(PIPELINE, {"page-views": VIEWS})

    minutes = run.tables["page-minutes"]
    assert minutes["/pricing|2026-11-25T10:00"]["views"] == 3
    assert minutes["/pricing|2026-11-25T10:00"]["visitors"] == 2
    assert minutes["/pricing|2026-11-25T10:02"]["views"] == 1
    assert minutes["/docs|2026-11-25T10:01"]["views"] == 1

    hours = run.tables["visitor-hours"]
    assert hours["u-001|2026-11-25T10"]["pages"] == ["/docs", "/pricing"]
    assert hours["u-001|2026-11-25T10"]["views"] == 3

    assert run.tables["country-days"]["DE|2026-11-25"]["views"] == 3
    assert sorted(str(d.reason) for d in run.dead_letters) == [
        "country must be a two-letter code",
        "page must be a path starting with /",
    ]


def test_the_routes_answer_from_the_tables() -> None:
    tables = run_pipeline(PIPELINE, {"page-views": VIEWS}).tables
    with TestClient(ROUTES, tables=tables) as client:
        newest_first = client.get("/v1/pages/minutes?page=/pricing&order=desc").json()
        assert [w["start"] for w in newest_first["windows"]] == [
            "2026-11-25T10:02",
            "2026-11-25T10:00",
        ]
        assert client.get("/v1/countries/de/days/2026-11-25").json()["views"] == 3
        assert client.get("/v1/countries/JP/days/2026-11-25").status_code == 404
        assert client.get("/v1/pages/minutes?page=pricing").status_code == 400


def test_a_visitor_reads_only_their_own_hours() -> None:
    tables = run_pipeline(PIPELINE, {"page-views": VIEWS}).tables
    reader = ("kiq:read:visitor-hours",)
    with TestClient(ROUTES, tables=tables, principal=caller("u-001", *reader)) as client:
        mine = client.get("/v1/visitors/u-001/hours").json()
        assert [w["views"] for w in mine["windows"]] == [3]
        assert client.get("/v1/visitors/u-002/hours").status_code == 403
        admin = caller("ops", "kiq:admin", *reader)
        assert client.get("/v1/visitors/u-002/hours", principal=admin).status_code == 200
        assert client.get("/v1/visitors/u-001/hours", principal=None).status_code == 401

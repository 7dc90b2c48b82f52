"""The application's tests: its pipeline over a few views, and its routes over what it made.

``python -m pytest`` in this directory runs them (pytest comes with ``pip install
'kiq[test]'``) in about half a minute, most of it Spark starting, with no broker and no
stream (``kiq.testing``: a local Spark batch through the same ``ctx`` as ``kiq pipeline
run``, and one kiq node in process serving the tables it computed).
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


def window(entity: str, start: str, end: str) -> str:
    """A windowed table's key: the entity, then its window's start and end."""
    return f"{entity}|{start}|{end}"


def test_the_pipeline_counts_views_per_window() -> None:
    run = run_pipeline(PIPELINE, {"page-views": VIEWS})

    minutes = run.tables["page-minutes"]
    ten = window("/pricing", "2026-11-25T10:00:00.000Z", "2026-11-25T10:01:00.000Z")
    assert (minutes[ten]["views"], minutes[ten]["visitors"]) == (3, 2)
    twelve = window("/pricing", "2026-11-25T10:02:00.000Z", "2026-11-25T10:03:00.000Z")
    assert minutes[twelve]["views"] == 1
    assert len(minutes) == 3  # /pricing at 10:00 and 10:02, /docs at 10:01

    hours = run.tables["visitor-hours"]
    mine = hours[window("u-001", "2026-11-25T10:00:00.000Z", "2026-11-25T11:00:00.000Z")]
    assert (mine["views"], mine["pages"]) == (3, ["/docs", "/pricing"])

    days = run.tables["country-days"]
    assert days[window("DE", "2026-11-25T00:00:00.000Z", "2026-11-26T00:00:00.000Z")]["views"] == 3
    assert sorted(str(d.reason) for d in run.dead_letters) == [
        "country must be a two-letter code",
        "page must be a path starting with /",
    ]
    windowed = {d.table: (d.key, d.window, d.retention_ms) for d in run.declared}
    assert windowed["page-minutes"] == (("page",), "window", 2 * 86_400_000)


def test_the_routes_answer_from_the_tables() -> None:
    run = run_pipeline(PIPELINE, {"page-views": VIEWS})
    with TestClient(ROUTES, tables=run.tables, declared=run.declared) as client:
        newest_first = client.get("/v1/pages/minutes?page=/pricing&order=desc").json()
        assert [w["start"] for w in newest_first["windows"]] == [
            "2026-11-25T10:02:00.000Z",
            "2026-11-25T10:00:00.000Z",
        ]
        since = client.get("/v1/pages/minutes?page=/pricing&from=2026-11-25T10:01").json()
        assert [w["value"]["views"] for w in since["windows"]] == [1]
        assert client.get("/v1/countries/de/days/2026-11-25").json()["views"] == 3
        assert client.get("/v1/countries/JP/days/2026-11-25").status_code == 404
        assert client.get("/v1/pages/minutes?page=pricing").status_code == 400


def test_a_visitor_reads_only_their_own_hours() -> None:
    run = run_pipeline(PIPELINE, {"page-views": VIEWS})
    reader = ("kiq:read:visitor-hours",)
    me = caller("u-001", *reader)
    with TestClient(ROUTES, tables=run.tables, declared=run.declared, principal=me) as client:
        mine = client.get("/v1/visitors/u-001/hours").json()
        assert [w["value"]["views"] for w in mine["windows"]] == [3]
        assert client.get("/v1/visitors/u-002/hours").status_code == 403
        admin = caller("ops", "kiq:admin", *reader)
        assert client.get("/v1/visitors/u-002/hours", principal=admin).status_code == 200
        assert client.get("/v1/visitors/u-001/hours", principal=None).status_code == 401

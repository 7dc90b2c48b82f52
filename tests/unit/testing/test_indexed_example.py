"""The bookings example's index through kiq.testing, as its author would test it: its
pipeline file over rows given here, then its route listing a trip's bookings (an index
equality across the table's partitions) on the tables the run computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiq.testing import TestClient, run_pipeline

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "bookings"
TRIPS = ["BER-MUC", "HAM-FRA", "a/b ü"]
BOOKINGS = [
    {"customer": f"c-{i % 7:03d}", "trip": TRIPS[i % 3], "booked_at": f"2026-11-22T10:{i:02d}:00Z"}
    for i in range(40)
]


def test_a_trips_bookings_are_its_index_in_key_order_paged():
    run = run_pipeline(
        f"{EXAMPLE / 'pipeline.py'}:build",
        {"bookings": [(b["customer"], b) for b in BOOKINGS]},
        partitions=3,
    )
    by_time = run.tables["bookings-by-time"]
    assert len(by_time) == len(BOOKINGS)
    (declared,) = [d for d in run.declared if d.table == "bookings-by-time"]
    assert [(i.field, i.type) for i in declared.index] == [("trip", "text")]
    with TestClient(
        f"{EXAMPLE / 'api.py'}:routes", tables=run.tables, declared=run.declared
    ) as client:
        for trip in TRIPS:
            want = [v for k, v in sorted(by_time.items()) if v["trip"] == trip]
            got, cursor = [], None
            while True:
                params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
                resp = client.get(f"/v1/trips/{trip.replace('/', '%2F')}/bookings", params=params)
                assert resp.status_code == 200, resp.text
                got.extend(resp.json()["bookings"])
                cursor = resp.json()["next_cursor"]
                if cursor is None:
                    break
            assert got == want and len(want) > 10, trip
        resp = client.get("/v1/tables/bookings-by-time/by/trip/HAM-FRA", params={"count": "true"})
        assert resp.json()["count"] == sum(b["trip"] == "HAM-FRA" for b in BOOKINGS)
        missing = client.get("/v1/tables/bookings-by-time/by/customer/c-001")
        assert missing.status_code == 404 and "index=['customer']" in missing.json()["message"]

"""The bookings HTTP API, on every node beside the table API (``[app] endpoints``).

POST /v1/bookings                       {"customer", "trip", "booked_at"} → 202, where it went
GET  /v1/customers/{customer}/bookings  ?from=T1&to=T2 (ISO 8601 UTC, any precision; T2
                                        excluded) → {"customer", "bookings": [...], "next_cursor"}
GET  /v1/trips/{trip}/bookings          ?cursor= → {"trip", "bookings": [...], "next_cursor"}

A customer's bookings are one range of ``bookings-by-time``, in the customer's partition;
a trip's are its index on ``trip``, across every partition, by customer then time.
"""

from __future__ import annotations

import json

from kiq import BadRequest, Reply, Request, Routes, json_reply

BOOKINGS = "bookings"
BY_TIME = "bookings-by-time"
SEP = "|"


def routes(app: Routes) -> None:
    app.post("/v1/bookings", post_booking)
    app.get("/v1/customers/{customer}/bookings", bookings)
    app.get("/v1/trips/{trip:path}/bookings", trip_bookings)  # a trip may hold a /


async def post_booking(request: Request) -> Reply:
    booking = await request.json('body must be {"customer", "trip", "booked_at"}')
    if not isinstance(booking, dict) or not all(
        isinstance(booking.get(f), str) for f in ("customer", "trip", "booked_at")
    ):
        raise BadRequest('body must be {"customer", "trip", "booked_at"}, all text')
    partition, offset = await request.write(BOOKINGS, booking["customer"], json.dumps(booking))
    return json_reply({"partition": partition, "offset": offset}, status=202)


async def bookings(request: Request) -> Reply:
    customer = request.path_params["customer"]
    if SEP in customer:
        raise BadRequest(f"a customer id has no {SEP!r}")
    low, high = request.query.get("from", ""), request.query.get("to")
    page = await request.tables.range(
        BY_TIME,
        prefix=customer + SEP,  # one partition: the customer's
        start=f"{customer}{SEP}{low}",
        end=None if high is None else f"{customer}{SEP}{high}",
        cursor=request.query.get("cursor"),
        limit=request.int_param("limit", 1, 1000) or 100,
    )
    return json_reply(
        {"customer": customer, "bookings": page.fragments(), "next_cursor": page.next_cursor}
    )


async def trip_bookings(request: Request) -> Reply:
    trip = request.path_params["trip"]
    page = await request.tables.by(
        BY_TIME,
        "trip",
        trip,
        cursor=request.query.get("cursor"),
        limit=request.int_param("limit", 1, 1000) or 100,
    )
    return json_reply({"trip": trip, "bookings": page.fragments(), "next_cursor": page.next_cursor})

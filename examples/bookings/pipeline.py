"""Bookings (seed 002): a railway operator's bookings, answerable by customer.

Input: topic ``bookings``, keyed by customer id, values like
``{"customer": "c-042", "trip": "BER-MUC", "booked_at": "2026-11-22T10:05:00.123Z"}``.

Two tables:

- ``latest-booking``: each customer's latest booking by ``booked_at`` (not by arrival:
  a late record of an older booking changes nothing), key ``CUSTOMER``;
- ``bookings-by-time``: every booking, key ``CUSTOMER|yyyy-MM-ddTHH:mm:ss.SSSZ``. The
  time is written fixed-width in UTC, so keys sort as bytes in time order, and every
  key of a customer sits in the customer's partition: a customer's bookings between two
  times are one range scan (``GET /v1/tables/bookings-by-time/range?from=C|T1&to=C|T2``).
  As in the seed, a customer books at most once per millisecond (a second booking in
  the same millisecond replaces the first). It is indexed by ``trip``: a trip's bookings,
  across every customer and partition, are one index query
  (``GET /v1/tables/bookings-by-time/by/trip/BER-MUC``).
"""

from __future__ import annotations

from pyspark.sql import functions as F

from kiq import Context

BOOKING = "customer STRING NOT NULL, trip STRING NOT NULL, booked_at TIMESTAMP NOT NULL"
# Fixed width, UTC (kiq's Spark session runs in UTC): sorts as bytes in time order.
ISO = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def build(ctx: Context) -> None:
    bookings = ctx.read("bookings", schema=BOOKING).select(
        "customer", "trip", F.date_format("booked_at", ISO).alias("booked_at")
    )

    # The greatest (booked_at, trip) per customer: the ISO text orders as the time does.
    latest = bookings.groupBy("customer").agg(F.max(F.struct("booked_at", "trip")).alias("b"))
    ctx.write_table(
        "latest-booking",
        latest.select("customer", "b.trip", "b.booked_at"),
        key="customer",
    )

    ctx.write_table("bookings-by-time", bookings, key=("customer", "booked_at"), index=["trip"])

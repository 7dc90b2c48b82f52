"""The index test's pipeline: bookings ``{"id", "hotel", "guest", "nights", "price",
"cancelled"}`` read from ``ix-bookings-in`` are the table ``ix-bookings`` (key ``id``,
indexed by ``hotel`` and ``price``; a cancelled booking deletes its key), and holds read
from ``ix-holds-in`` the table ``ix-holds`` (key ``id``, indexed by ``hotel``, kept
``HOLD_TTL`` after their last write).

Run as a user would (``kiq pipeline run tests/integration/indexed/pipeline.py:build``): it
imports kiq only, and kiq loads it as a file.
"""

from __future__ import annotations

from kiq import Context

BOOKINGS_IN, BOOKINGS = "ix-bookings-in", "ix-bookings"
HOLDS_IN, HOLDS = "ix-holds-in", "ix-holds"
PARTITIONS = 6
HOLD_TTL_S = 30
HOLD_TTL = f"{HOLD_TTL_S} seconds"
BOOKING = (
    "id STRING NOT NULL, hotel STRING NOT NULL, guest STRING NOT NULL, nights INT NOT NULL, "
    "price DOUBLE NOT NULL, cancelled BOOLEAN NOT NULL"
)


def build(ctx: Context) -> None:
    bookings = ctx.read(BOOKINGS_IN, schema=BOOKING)
    ctx.write_table(
        BOOKINGS,
        bookings,
        key="id",
        index=["hotel", "price"],
        delete="cancelled",
        partitions=PARTITIONS,
    )
    holds = ctx.read(HOLDS_IN, schema=BOOKING).drop("cancelled")
    ctx.write_table(HOLDS, holds, key="id", index=["hotel"], ttl=HOLD_TTL, partitions=PARTITIONS)

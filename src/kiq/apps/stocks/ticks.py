"""The stock-tick input contract, as ``ctx.read`` checks it in Spark SQL.

A tick is valid when it is JSON with every field (the schema's ``NOT NULL`` ones),
its key is its symbol, the symbol matches ``[A-Z0-9.-]{1,12}``, ``ts`` falls in
2000-2049, prices and sizes are positive, bid <= ask, ``last``/``last_size`` are
both set or both null, and the exchange is one the pipeline knows. Anything else
goes to the dead-letter topic with the first reason that applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

TICK_SCHEMA = (
    "symbol STRING NOT NULL, exchange STRING NOT NULL, ts BIGINT NOT NULL, "
    "bid DOUBLE NOT NULL, ask DOUBLE NOT NULL, bid_size BIGINT NOT NULL, "
    "ask_size BIGINT NOT NULL, last DOUBLE, last_size BIGINT"
)
SYMBOL_PATTERN = r"^[A-Z0-9.-]{1,12}$"
# [2000-01-01, 2050-01-01) UTC in epoch milliseconds (the feeds' TS_RANGE_MS).
TS_RANGE_MS = (946_684_800_000, 2_524_608_000_000)


def tick_rules(exchanges: Sequence[str]) -> list[tuple[str, str | Column]]:
    """(condition of a bad tick, reason), in the order they are checked, after the schema's."""
    from pyspark.sql import functions as F

    known = ", ".join(f"'{e}'" for e in exchanges)
    return [
        (f"ts < {TS_RANGE_MS[0]} OR ts >= {TS_RANGE_MS[1]}", "ts outside 2000-2049"),
        ("__key IS NULL OR __key != symbol", "key is not the symbol"),
        (f"NOT regexp_like(symbol, '{SYMBOL_PATTERN}')", "symbol not [A-Z0-9.-]{1,12}"),
        (
            f"exchange NOT IN ({known})",
            F.concat(F.lit("unknown exchange "), F.col("exchange")),
        ),
        ("bid <= 0 OR ask <= 0", "non-positive price"),
        ("bid_size <= 0 OR ask_size <= 0", "non-positive size"),
        ("bid > ask", "bid > ask"),
        ("(last IS NULL) != (last_size IS NULL)", "last and last_size must come together"),
        ("last IS NOT NULL AND (last <= 0 OR last_size <= 0)", "non-positive trade"),
    ]

"""The bank's pipeline: each transfer ``{"from", "to", "amount"}`` read from ``transfers`` is
a debit and a credit, summed per account into table ``accounts`` (key the account, value
``{"balance": N}``), written ``consistent=True``: a marker per micro-batch in each of its 6
partitions. A transfer's debit and credit come from one input record, so they land in the
same micro-batch, and the balances sum to 0 at every marker.

Run it as a user would (``kiq pipeline run tests/integration/bank/pipeline.py:build
--interval "1 second" --trigger microbatch``), or in a test's own Context with ``bank``. It
imports kiq and pyspark only: kiq loads it as a file.
"""

from __future__ import annotations

from kiq import Context

TRANSFERS, ACCOUNTS = "transfers", "accounts"
PARTITIONS = 6
INTERVAL = "1 second"  # the micro-batch interval kiq pipeline run --interval is given
TRANSFER = "`from` STRING NOT NULL, `to` STRING NOT NULL, amount BIGINT NOT NULL"


def bank(ctx: Context, transfers: str = TRANSFERS, accounts: str = ACCOUNTS) -> None:
    """Keep ``accounts`` from ``transfers`` (topic names a test may make its own)."""
    from pyspark.sql import functions as F

    moves = ctx.read(transfers, schema=TRANSFER).select(
        F.explode(
            F.array(
                F.struct(F.col("from").alias("account"), (-F.col("amount")).alias("delta")),
                F.struct(F.col("to").alias("account"), F.col("amount").alias("delta")),
            )
        ).alias("move")
    )
    balances = moves.groupBy(F.col("move.account").alias("account")).agg(
        F.struct(F.sum("move.delta").alias("balance")).alias("state")
    )
    ctx.write_table(
        accounts,
        balances,
        key="account",
        value="state",
        partitions=PARTITIONS,
        consistent=True,
    )


def build(ctx: Context) -> None:
    """The target ``kiq pipeline run`` takes: topics ``transfers`` and ``accounts``."""
    bank(ctx)

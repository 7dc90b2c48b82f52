"""Point of sale (seed 004): invoices from the stores' tills, branched, mapped, joined and
aggregated with Spark, the way a Kafka Streams topology does with its DSL.

Inputs: topic ``invoices``, keyed by store id, values like ``{"invoice_id": "i-1",
"store_id": "s-01", "customer": "card-5412", "customer_type": "PRIME", "delivery":
"HOME-DELIVERY", "total": 612.5}``; topic ``stores``, keyed by store id, values
``{"store_id", "name", "city"}``: small reference data, also served as a global table.

Outputs:

- ``high-value-invoices`` (a stream): invoices of at least 500, the customer's card
  masked (filter, map);
- ``shipments`` (a stream): home deliveries, with the store's name and city for the
  courier (branch, join with the stores);
- ``rewards`` (a table): each PRIME customer's points, one per whole 10 of each invoice,
  with their invoice count and spend, key ``CUSTOMER`` (aggregation).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kiq import Context

INVOICE = (
    "invoice_id STRING NOT NULL, store_id STRING NOT NULL, customer STRING NOT NULL, "
    "customer_type STRING NOT NULL, delivery STRING NOT NULL, total DOUBLE NOT NULL"
)
STORE = "store_id STRING, name STRING, city STRING"
HIGH_VALUE = 500
POINTS_PER = 10  # one point per whole 10 spent


def build(ctx: Context) -> None:
    invoices = ctx.read(
        "invoices",
        schema=INVOICE,
        reject=[
            ("total < 0", "total must not be negative"),
            ("delivery NOT IN ('HOME-DELIVERY', 'TAKEAWAY')", "unknown delivery"),
        ],
    )

    # filter + map: the card masked before the invoice leaves for the fraud desk
    masked = F.concat(F.lit("****"), F.substring("customer", -4, 4)).alias("customer")
    high = invoices.where(F.col("total") >= HIGH_VALUE)
    ctx.write_topic(
        "high-value-invoices",
        high.select("invoice_id", "store_id", masked, "total"),
        key="invoice_id",
    )

    # branch + join: home deliveries go to the couriers with the store they leave from
    shipments = invoices.where("delivery = 'HOME-DELIVERY'").join(
        latest_stores(ctx), "store_id", "left"
    )
    ctx.write_topic(
        "shipments",
        shipments.select("invoice_id", "store_id", "name", "city", "customer", "total"),
        key="invoice_id",
    )

    # aggregation into a served table
    prime = invoices.where("customer_type = 'PRIME'")
    rewards = prime.groupBy("customer").agg(
        F.sum(F.floor(F.col("total") / POINTS_PER)).alias("points"),
        F.count("*").alias("invoices"),
        F.round(F.sum("total"), 2).alias("spent"),
    )
    ctx.write_table("rewards", rewards, key="customer")


def latest_stores(ctx: Context) -> DataFrame:
    """The stores as they are now: the latest record per key of topic ``stores``.

    A batch read, joined with the invoice stream: Spark runs it again for every
    micro-batch, so invoices see a store's change from the batch after it arrives.
    ``ctx`` has no batch read of a topic yet, hence Spark's own Kafka reader, on the
    broker kiq was given, with the security it was given.
    """
    raw = (
        ctx.spark.read.format("kafka")
        .option("kafka.bootstrap.servers", ctx.opts.bootstrap)
        .options(**ctx.opts.kafka)  # the Kafka security kiq runs with, if any
        .option("subscribe", "stores")
        .load()
    )
    latest = raw.groupBy("key").agg(F.max_by("value", "offset").alias("value"))
    store = F.from_json(F.col("value").cast("string"), STORE).alias("store")
    return latest.select(store).select("store.*").where("store_id IS NOT NULL")

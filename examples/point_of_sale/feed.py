"""Sample data for the example: the stores once, then a few invoices per second until
Ctrl-C, keyed by store id.

The bootstrap is ``$KIQ_BOOTSTRAP`` (``kiq up`` sets it) or the first argument. Keys go
to partitions with Kafka's murmur2 (``murmur2_random``), the partitioner kiq expects.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from confluent_kafka import Producer

STORES = {
    "s-01": ("Alexanderplatz", "Berlin"),
    "s-02": ("Jungfernstieg", "Hamburg"),
    "s-03": ("Marienplatz", "Munich"),
}


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KIQ_BOOTSTRAP", "")
    producer = Producer(
        {"bootstrap.servers": bootstrap or "127.0.0.1:9092", "partitioner": "murmur2_random"}
    )
    for store_id, (name, city) in STORES.items():
        store = {"store_id": store_id, "name": name, "city": city}
        producer.produce("stores", key=store_id, value=json.dumps(store))
    rng = random.Random()
    for n in range(1, sys.maxsize):
        store_id = rng.choice(list(STORES))
        invoice = {
            "invoice_id": f"i-{n}",
            "store_id": store_id,
            "customer": f"card-{rng.randrange(50):04d}",
            "customer_type": rng.choice(["PRIME", "NON-PRIME"]),
            "delivery": rng.choice(["HOME-DELIVERY", "TAKEAWAY"]),
            "total": rng.randrange(100, 100_000) / 100,
        }
        producer.produce("invoices", key=store_id, value=json.dumps(invoice))
        producer.poll(0)
        time.sleep(0.2)


if __name__ == "__main__":
    main()

"""Sample page views for the application: a few per second, keyed by visitor, until Ctrl-C.

The bootstrap is ``$KIQ_BOOTSTRAP`` (``kiq up`` sets it) or the first argument; the
Kafka settings (SASL, TLS) are the application's own, as ``kiq up`` hands them on. Keys go
to partitions with Kafka's murmur2 (``murmur2_random``), the partitioner kiq expects.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from confluent_kafka import Producer

PAGES = ["/", "/pricing", "/docs", "/docs/install", "/blog", "/signup"]
COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN"]


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KIQ_BOOTSTRAP", "")
    producer = Producer(
        {"bootstrap.servers": bootstrap or "127.0.0.1:9092", "partitioner": "murmur2_random"}
    )
    rng = random.Random()
    while True:
        user = f"u-{rng.randrange(50):03d}"
        view = {
            "user": user,
            "page": rng.choice(PAGES),
            "country": rng.choice(COUNTRIES),
            "ts": int(time.time() * 1000),
        }
        producer.produce("page-views", key=user, value=json.dumps(view))
        producer.poll(0)
        time.sleep(0.1)


if __name__ == "__main__":
    main()

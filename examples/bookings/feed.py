"""Sample bookings for the example: a few per second, keyed by customer id, until Ctrl-C.

The bootstrap is ``$KIQ_BOOTSTRAP`` (``kiq up`` sets it) or the first argument. Keys go
to partitions with Kafka's murmur2 (``murmur2_random``), the partitioner kiq expects.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import UTC, datetime

from confluent_kafka import Producer

TRIPS = ["BER-MUC", "HAM-FRA", "CGN-BER", "MUC-ZRH", "FRA-PAR", "BER-WAW"]


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KIQ_BOOTSTRAP", "")
    producer = Producer(
        {"bootstrap.servers": bootstrap or "127.0.0.1:9092", "partitioner": "murmur2_random"}
    )
    rng = random.Random()
    while True:
        customer = f"c-{rng.randrange(100):03d}"
        booked_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        booking = {"customer": customer, "trip": rng.choice(TRIPS), "booked_at": booked_at}
        producer.produce("bookings", key=customer, value=json.dumps(booking))
        producer.poll(0)
        time.sleep(0.2)


if __name__ == "__main__":
    main()

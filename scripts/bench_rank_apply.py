"""What a rank index costs a restore, in the writing thread's CPU alone.

``kiq bench tables`` times whole restores on a node: Kafka, the materializer and the
machine's other work count in it, and on a busy machine its ranked/plain ratio moves by
more than a change to the store can. This applies the same quotes (``bench.dataset``) to
fresh ``RocksDBPartitionStore``s as a restore does (each store its partition's keys in
order, ``--batch`` at a time), plain and ranked by ``bid`` in turns, and prints the thread
CPU of ``apply`` per record: each round's, then the medians and their ratio.

    PYTHONPATH=src .venv/bin/python scripts/bench_rank_apply.py [--keys 100000] [--stores 12]
        [--batch 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from kiq.bench.dataset import key_of, quote
from kiq.partitioning import partition_for
from kiq.stores import MemoryBudget, RocksDBPartitionStore

Records = list[list[tuple[bytes, bytes]]]


def restore_cpu(parts: Records, batch: int, rank_by: str | None) -> float:
    """Thread CPU seconds of every ``apply`` restoring ``parts`` into fresh stores."""
    budget = MemoryBudget()  # one per run, as a fresh node's
    cpu = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        stores = [
            RocksDBPartitionStore(Path(tmp) / str(i), budget, rank_by=rank_by)
            for i in range(len(parts))
        ]
        try:
            for store, records in zip(stores, parts, strict=True):
                for start in range(0, len(records), batch):
                    changes = [
                        (key, value, offset)
                        for offset, (key, value) in enumerate(records[start : start + batch], start)
                    ]
                    began = time.thread_time()
                    store.apply(changes, changes[-1][2])
                    cpu += time.thread_time() - began
        finally:
            for store in stores:
                store.close()
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--stores", type=int, default=12)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    parts: Records = [[] for _ in range(args.stores)]
    for i in range(args.keys):
        key = key_of(i)
        parts[partition_for(key, args.stores)].append((key.encode(), orjson.dumps(quote(key))))
    per_record = {"plain": [], "ranked": []}  # µs
    for round_ in range(1, args.rounds + 1):
        for name, rank_by in (("plain", None), ("ranked", "bid")):
            seconds = restore_cpu(parts, args.batch, rank_by)
            per_record[name].append(seconds / args.keys * 1e6)
        print(f"round {round_}: " + ", ".join(f"{n} {v[-1]:.3f} µs" for n, v in per_record.items()))
    plain, ranked = (statistics.median(per_record[n]) for n in ("plain", "ranked"))
    print(
        f"median a record: plain {plain:.3f} µs, ranked {ranked:.3f} µs "
        f"(rank index {ranked - plain:.3f} µs); plain/ranked {plain / ranked:.3f}"
    )


if __name__ == "__main__":
    main()

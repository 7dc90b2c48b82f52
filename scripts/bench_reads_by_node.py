"""Each node's CPU per read, by kind of read: where a top or a window page costs what it does.

``kiq bench tables`` gives the three nodes' CPU per request together; this starts the same
three nodes over the same quotes (a plain table, one ranked by ``bid``, a windowed one),
reads through n1 (16 at a time) point lookups, the same top-10, tops of 5-19 (no two
alike at once, so none shares another's answer) and window pages of 100, and prints per
kind and round: p50, its ratio to the lookups', requests/s, and the CPU per request of
n1, n2, n3 and this process (the load), in µs, from /proc. Then how each table's
partitions fell on the nodes: a table whose partitions all sit on n1 is read locally.

    PYTHONPATH=src .venv/bin/python scripts/bench_reads_by_node.py [--requests 6000]
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from kiq.bench.cluster import start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import key_of, load_quotes
from kiq.bench.stack import local_stack
from kiq.bench.stats import cpu_seconds
from kiq.bench.tables import _declare, _load, _load_windows, _spread
from kiq.tables.declared import Declared

KEYS = 100_000
ENTITIES = 1_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with local_stack() as stack:
        keys = [key_of(i) for i in range(KEYS)]
        plain = load_quotes(stack.bootstrap, "bench-plain", keys)
        ranked = load_quotes(stack.bootstrap, "bench-ranked", keys)
        _declare(
            stack.bootstrap,
            Declared(table="plain", topic="bench-plain", key=("symbol",)),
            Declared(table="ranked", topic="bench-ranked", key=("symbol",), rank_by="bid"),
        )
        windows = _load_windows(stack.bootstrap, ENTITIES, 100)
        nodes = start_nodes(stack, 3, ["plain", "ranked", "minutes"])
        wait_settled(nodes)
        for table, last in (("plain", plain), ("ranked", ranked), ("minutes", windows)):
            wait_applied(nodes, table, last)
        print("actives on n1/n2/n3:", json.dumps(_spread(nodes)))
        rng = random.Random(29)
        n = args.requests
        paths = {
            "lookup": [f"/v1/tables/plain/keys/{rng.choice(keys)}" for _ in range(n)],
            "top10": ["/v1/tables/ranked/top?n=10"] * n,
            "top_varied": [f"/v1/tables/ranked/top?n={rng.randrange(5, 20)}" for _ in range(n)],
            "windows": [
                f"/v1/tables/minutes/keys/E{rng.randrange(ENTITIES):05d}/windows?limit=100"
                for _ in range(n)
            ],
        }
        pids = [node.proc.pid if node.proc else None for node in nodes]
        for round_ in range(1, args.rounds + 1):
            base = None
            for name, some in paths.items():
                before = [cpu_seconds([pid]) or 0.0 for pid in pids]
                load_before = time.process_time()
                figures = asyncio.run(_load(nodes[0].url, some, 16, []))
                cpu = [(cpu_seconds([pid]) or 0.0) - b for pid, b in zip(pids, before, strict=True)]
                cpu.append(time.process_time() - load_before)
                base = base or figures["p50_ms"]
                per_request = "/".join(f"{c / len(some) * 1e6:.0f}" for c in cpu)
                print(
                    f"round {round_} {name:10} p50 {figures['p50_ms']:6.2f} ms "
                    f"({figures['p50_ms'] / base:.2f}x) {figures['per_s']:8,.0f}/s "
                    f"CPU µs/request n1/n2/n3/load {per_request} errors {figures['errors']}"
                )


if __name__ == "__main__":
    main()

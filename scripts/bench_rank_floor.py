"""What any rank index in Python over rocksdict must spend per record, against the budget
``restore_ranked_vs_plain`` >= 0.7 leaves it.

A restore ranked at 0.7 of a plain one may spend ``plain / 0.7 - plain`` more per record
than the plain restore (``--plain-rate``: ``ingest_plain_records_per_s`` of
``kiq bench tables``). This times the steps no ranked write can skip, each alone, on the
same quotes (``bench.dataset``) in batches as a restore applies them:

- the ranked field read from the value (``Scorer``: msgspec decodes that field alone);
- the rank entry's insert into RocksDB: a WriteBatch of the data alone, then of the data
  and each record's ``score + key`` entry (in the batch's order, and sorted, with the
  sort's own cost), written with the store's options;
- the old-score look-up a write needs to move a key already ranked (a multi-get of keys
  that are absent, as in a restore);
- whether rocksdict lets go of the GIL in ``write``: a write beside a pure-Python loop in
  another thread, against the two one after the other.

    PYTHONPATH=src .venv/bin/python scripts/bench_rank_floor.py [--keys 100000]
        [--batch 5000] [--rounds 3] [--plain-rate 800000]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from rocksdict import Rdict, WriteBatch, WriteOptions

from kiq.bench.dataset import key_of, quote
from kiq.stores import MemoryBudget
from kiq.stores.rank import scorer_of
from kiq.stores.rocksdb import _options

_OFFSET = b"\0" * 8  # a stored value's offset prefix


def best_of(rounds: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(rounds))


def timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def write_seconds(
    batches: list[list[tuple[bytes, bytes, bytes]]], rank: str | None, families: tuple[str, ...]
) -> float:
    """Seconds of ``Rdict.write`` alone for the batches made ready beforehand: the data,
    and the rank entries (``rank``: None, "given" order or "sorted") into ``families``."""
    budget = MemoryBudget()
    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(
            str(Path(tmp) / "db"),
            _options(budget),
            column_families={name: _options(budget, 4 << 20) for name in families},
        )
        options = WriteOptions()
        options.sync = False
        db.set_write_options(options)
        handles = {name: db.get_column_family_handle(name) for name in families}
        ready = []
        for rows in batches:
            wb = WriteBatch(raw_mode=True)
            for key, value, _ in rows:
                wb.put(key, _OFFSET + value)
            if rank is not None:
                if "score" in handles:
                    for key, _, score in rows:
                        wb.put(key, score, handles["score"])
                entries = [score + key for key, _, score in rows]
                for entry in sorted(entries) if rank == "sorted" else entries:
                    wb.put(entry, b"", handles["rank"])
            ready.append(wb)
        seconds = sum(timed(lambda wb=wb: db.write(wb)) for wb in ready)
        del handles
        db.close()
    return seconds


def lookup_seconds(batches: list[list[tuple[bytes, bytes, bytes]]]) -> float:
    """A multi-get of each batch's keys in an empty family (a restore's: every one a miss)."""
    budget = MemoryBudget()
    with tempfile.TemporaryDirectory() as tmp:
        options = _options(budget, 4 << 20)
        options.set_memtable_prefix_bloom_ratio(0.02)
        options.set_memtable_whole_key_filtering(True)
        db = Rdict(str(Path(tmp) / "db"), _options(budget), column_families={"score": options})
        family = db.get_column_family("score")
        seconds = 0.0
        for rows in batches:
            keys = [key for key, _, _ in rows]
            began = time.perf_counter()
            family.get(keys)
            seconds += time.perf_counter() - began
        del family
        db.close()
    return seconds


def gil_held(batches: list[list[tuple[bytes, bytes, bytes]]]) -> tuple[float, float, float]:
    """(writes alone, loop alone, both at once in two threads), seconds: the writes of
    WriteBatches made beforehand, each run into a fresh store."""

    def loop() -> None:
        total = 0
        for i in range(3_000_000):
            total += i

    def ready(tmp: str) -> tuple[Rdict, list[WriteBatch]]:
        db = Rdict(str(Path(tmp) / "db"), _options(MemoryBudget()))
        made = []
        for rows in batches:
            wb = WriteBatch(raw_mode=True)
            for key, value, _ in rows:
                wb.put(key, _OFFSET + value)
            made.append(wb)
        return db, made

    def writes(db: Rdict, made: list[WriteBatch]) -> None:
        for wb in made:
            db.write(wb)

    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        db, made = ready(one)
        alone_write = timed(lambda: writes(db, made))
        db.close()
        alone_loop = timed(loop)
        db, made = ready(two)
        thread = threading.Thread(target=writes, args=(db, made))
        began = time.perf_counter()
        thread.start()
        loop()
        thread.join()
        together = time.perf_counter() - began
        db.close()
    return alone_write, alone_loop, together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plain-rate", type=float, default=800_000.0)
    args = parser.parse_args()
    n = args.keys
    scorer = scorer_of("bid")
    values = [orjson.dumps(quote(key_of(i))) for i in range(n)]
    scores = scorer.many(values)
    rows = [
        (key_of(i).encode(), values[i], score)
        for i, score in enumerate(scores)
        if score is not None
    ]
    batches = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
    per = 1e6 / n  # seconds over the run -> µs a record

    def us(run: Callable[[], float]) -> float:
        return best_of(args.rounds, run) * per

    field = us(
        lambda: timed(
            lambda: [scorer.many(values[i : i + args.batch]) for i in range(0, n, args.batch)]
        )
    )
    data = us(lambda: write_seconds(batches, None, ()))
    given = us(lambda: write_seconds(batches, "given", ("rank",)))
    ordered = us(lambda: write_seconds(batches, "sorted", ("rank",)))
    both = us(lambda: write_seconds(batches, "given", ("score", "rank")))
    entries = [[score + key for key, _, score in b] for b in batches]
    sort = us(lambda: timed(lambda: [sorted(e) for e in entries]))
    lookup = us(lambda: lookup_seconds(batches))
    alone_write, alone_loop, together = gil_held(batches)

    insert = min(given - data, ordered - data + sort)
    plain = 1e6 / args.plain_rate
    budget = plain / 0.7 - plain
    print(f"ranked field read (Scorer.many):          {field:.3f} µs a record")
    print(f"write, data alone:                        {data:.3f} µs")
    print(f"write, data + rank entry (batch order):   {given:.3f} µs (+{given - data:.3f})")
    sorted_extra = f"+{ordered - data:.3f}, sort {sort:.3f}"
    print(f"write, data + rank entry (sorted):        {ordered:.3f} µs ({sorted_extra})")
    print(f"write, data + score + rank (the store's): {both:.3f} µs (+{both - data:.3f})")
    print(f"old-score look-up, all misses:            {lookup:.3f} µs")
    print(
        f"rocksdict write beside a Python loop: {together:.3f} s, "
        f"one after the other {alone_write + alone_loop:.3f} s"
        f" ({'the GIL is held' if together > 0.9 * (alone_write + alone_loop) else 'overlaps'})"
    )
    print(
        f"floor beyond plain (field + cheapest insert): {field + insert:.3f} µs; "
        f"with the old-score look-up {field + insert + lookup:.3f} µs; "
        f"budget for 0.7 at {args.plain_rate:,.0f} plain records/s: {budget:.3f} µs"
    )


if __name__ == "__main__":
    main()

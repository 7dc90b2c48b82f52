"""The bank, as a benchmark: what a read as of one batch (``?consistent=batch``) costs
beside a plain one, what the nodes hold for it, and how often a plain read sees half a batch.

A writer keeps ``accounts`` balances on 6 partitions and, every ``interval_s`` (a
micro-batch pipeline's trigger), moves random amounts between random pairs: one batch of
records, then a batch marker to every partition (``kiq.markers``), as
``ctx.write_table(..., consistent=True)`` writes them. The total never changes, so every
answer holding all accounts must sum to it.

Three nodes serve the table; readers enter through each in turn and ask for every
account, by ``multiget`` and by ``range``, plain and as of a batch, interleaved round by
round, so the two see the same machine. Figures: p50/p99 of each, the batch reads' p50
over the plain ones', the answers whose sum was not the total (plain reads are expected
to see some; batch reads must see none), and the nodes' RSS after the writer ran without
markers, then with them.

No Spark runs: the writer produces what a consistent pipeline would.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from kiq.bench.cluster import start_nodes, wait_applied, wait_settled
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.stats import percentile
from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError, KiqError
from kiq.kafka import compacted, create_topics, end_offsets
from kiq.kafka.records import JsonProducer
from kiq.markers import MARKER_KEY, marker_value
from kiq.pipelines.runner import COMPACTED
from kiq.runtime.nodes import LocalNode
from kiq.tables.declared import Declared

TABLE, TOPIC, PARTITIONS = "accounts", "bench-accounts", 6
OPENING = 1_000  # each account's first balance


@dataclass(frozen=True)
class ConsistencyConfig:
    accounts: int = 1_000
    transfers: int = 200  # per batch
    interval_s: float = 1.0
    rounds: int = 6
    requests: int = 150  # per round, kind and mode
    concurrency: int = 4
    settle_s: float = 20.0  # the writer's run before each RSS reading


def run_consistency(cfg: ConsistencyConfig, progress: Reporter | None = None) -> dict[str, object]:
    if min(cfg.accounts, cfg.transfers, cfg.rounds, cfg.requests, cfg.concurrency) < 1:
        raise ConfigError("--accounts, --transfers, --rounds, --requests must be positive")
    if cfg.accounts < 2 or cfg.interval_s <= 0:
        raise ConfigError("--accounts must be at least 2 and --interval-s positive")
    out: dict[str, object] = {"scenario": "consistency", "accounts": cfg.accounts}
    with reporter(progress, "consistency") as show, local_stack(progress=show) as stack:
        create_topics(stack.bootstrap, {TOPIC: PARTITIONS}, config=COMPACTED)
        compacted.ensure(stack.bootstrap, CATALOG_TOPIC)
        declared = Declared(table=TABLE, topic=TOPIC, key=("id",))
        compacted.put(stack.bootstrap, CATALOG_TOPIC, {declared.catalog_key: declared.encode()})
        bank = Bank(stack.bootstrap, cfg)
        show.phase("starting 3 nodes")
        nodes = start_nodes(stack, 3, [TABLE])
        wait_settled(nodes)
        wait_applied(nodes, TABLE, bank.last_offsets())
        total = OPENING * cfg.accounts
        show.phase("writing without markers", cfg.settle_s)
        with bank.running(markers=False):
            time.sleep(cfg.settle_s)
        out["rss_mb_without_markers"] = _rss_mb(nodes)
        show.phase("writing with markers", cfg.settle_s)
        with bank.running(markers=True):
            time.sleep(cfg.settle_s)
            out["rss_mb_with_markers"] = _rss_mb(nodes)
            figures: dict[str, list[float]] = {}
            wrong: dict[str, int] = {}
            for round_ in range(cfg.rounds):
                for kind in ("multiget", "range"):
                    for mode in ("plain", "batch"):
                        show.phase(f"round {round_ + 1}/{cfg.rounds}: {kind} {mode}")
                        name = f"{kind}_{mode}"
                        times = figures.setdefault(name, [])
                        wrong[name] = wrong.get(name, 0) + asyncio.run(
                            _reads(nodes, kind, mode, cfg, total, times)
                        )
        out["batches_written"] = bank.batches
        for name, times in figures.items():
            out[f"{name}_p50_ms"] = round(percentile(times, 50), 2)
            out[f"{name}_p99_ms"] = round(percentile(times, 99), 2)
            out[f"{name}_answers"] = len(times)
            out[f"{name}_sum_violations"] = wrong[name]
        for kind in ("multiget", "range"):
            plain = percentile(figures[f"{kind}_plain"], 50)
            out[f"{kind}_batch_p50_vs_plain"] = round(
                percentile(figures[f"{kind}_batch"], 50) / plain, 2
            )
        without, with_ = out["rss_mb_without_markers"], out["rss_mb_with_markers"]
        assert isinstance(without, float) and isinstance(with_, float)
        out["rss_with_markers_vs_without"] = round(with_ / without, 3)
        if wrong["multiget_batch"] or wrong["range_batch"]:
            raise KiqError(f"reads as of a batch saw a wrong total: {wrong}")
    return out


class Bank:
    """The writer: balances, moved between random pairs batch by batch."""

    def __init__(self, bootstrap: str, cfg: ConsistencyConfig) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        self.ids = [f"a{i:05d}" for i in range(cfg.accounts)]
        self.balances = dict.fromkeys(self.ids, OPENING)
        self.batches = 0
        self._rng = random.Random(7)
        self._producer = JsonProducer(bootstrap, TOPIC, key_field="id", linger_ms=5)
        for account in self.ids:
            self._producer.produce({"id": account, "balance": OPENING})
        self._flush()

    def last_offsets(self) -> dict[int, int]:
        return {p: end - 1 for p, end in end_offsets(self.bootstrap, TOPIC).items() if end}

    def running(self, markers: bool) -> _Running:
        return _Running(self, markers)

    def one_batch(self, markers: bool) -> None:
        moved: set[str] = set()
        for _ in range(self.cfg.transfers):
            source, target = self._rng.sample(self.ids, 2)
            amount = self._rng.randint(1, 50)
            self.balances[source] -= amount
            self.balances[target] += amount
            moved.update((source, target))
        for account in sorted(moved):
            self._producer.produce({"id": account, "balance": self.balances[account]})
        self._flush()
        if markers:
            for p in range(PARTITIONS):
                self._producer.produce_raw(MARKER_KEY, marker_value(self.batches), p)
            self._flush()
        self.batches += 1

    def _flush(self) -> None:
        if self._producer.flush(30) or self._producer.failed:
            raise KiqError(f"{TOPIC}: records unacknowledged ({self._producer.last_error})")


class _Running:
    """The writer's thread, one batch every ``interval_s``, while the block runs."""

    def __init__(self, bank: Bank, markers: bool) -> None:
        self._bank = bank
        self._markers = markers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bank-writer", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        every = self._bank.cfg.interval_s
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                self._bank.one_batch(self._markers)
                self._stop.wait(max(0.0, every - (time.monotonic() - began)))
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def __enter__(self) -> _Running:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise KiqError(f"the bank's writer failed: {self.error!r}") from self.error


async def _reads(
    nodes: list[LocalNode],
    kind: str,
    mode: str,
    cfg: ConsistencyConfig,
    total: int,
    times: list[float],
) -> int:
    """``cfg.requests`` answers holding every account, through each node in turn:
    how many did not sum to ``total``. Latencies (ms) go to ``times``."""
    ids = [f"a{i:05d}" for i in range(cfg.accounts)]
    body = orjson.dumps({"keys": ids})
    suffix = "?consistent=batch" if mode == "batch" else ""
    wrong = 0
    asked = iter(range(cfg.requests))
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal wrong
            for i in asked:
                base = nodes[i % len(nodes)].url
                started = time.perf_counter()
                if kind == "multiget":
                    url = f"{base}/v1/tables/{TABLE}/multiget{suffix}"
                    async with session.post(url, data=body) as resp:
                        got = await resp.read()
                        status = resp.status
                else:
                    sep = "&" if suffix else "?"
                    url = f"{base}/v1/tables/{TABLE}/range{suffix}{sep}limit={cfg.accounts}"
                    async with session.get(url) as resp:
                        got = await resp.read()
                        status = resp.status
                times.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    raise KiqError(f"{url}: HTTP {status}: {got[:200]!r}")
                wrong += _sum(kind, orjson.loads(got), cfg.accounts) != total

        await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
    return wrong


def _sum(kind: str, answer: dict[str, object], accounts: int) -> int:
    """The balances an answer holds, summed; -1 when it does not hold every account."""
    if kind == "multiget":
        found = answer["found"]
        assert isinstance(found, dict)
        values = list(found.values())
    else:
        items = answer["items"]
        assert isinstance(items, list)
        values = [item["value"] for item in items]
    if len(values) != accounts:
        return -1
    return sum(int(v["balance"]) for v in values)


def _rss_mb(nodes: list[LocalNode]) -> float:
    """The nodes' resident memory together, from /proc (MiB)."""
    total_kb = 0
    for node in nodes:
        if node.proc is None:
            continue
        for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)

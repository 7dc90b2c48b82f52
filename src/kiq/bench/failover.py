"""Failover: a steady reader load over three nodes while one of them is killed with -9.

The reader (:class:`kiq.bench.reader.ReaderLoad`) sends ``rate`` GETs a second
for random keys, spread over the nodes alive at that moment, as a load balancer
would: the killed node leaves the rotation the instant it dies, and requests in
flight to it then fail and are counted (``failed_requests``; of those,
``failed_via_survivors`` went through a node that stayed up, the figure that
judges kiq). Figures, from the kill:

- ``seconds_until_all_answered``: for each partition the victim was active for,
  the time until the first successful answer to a request sent after the kill;
  the max over those partitions (a standby answers at once, so this is small).
- ``seconds_until_not_stale``: the time until the last answer marked
  ``X-Kiq-Stale: true`` (from a standby): the group has rebalanced and promoted
  new actives by then. Bounded below by the session timeout (``KIQ_SERVE_SESSION_TIMEOUT_MS``).
  ``stale_at_end`` says the last answer was still stale: the window was too
  short, and the figure is only a lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kiq.bench.cluster import actives, start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, reporter
from kiq.bench.reader import LoadStats, ReaderLoad, watch_reads
from kiq.bench.stack import local_stack
from kiq.errors import ConfigError

TOPIC = "bench-failover"
VICTIM = "n2"


@dataclass(frozen=True)
class FailoverConfig:
    keys: int = 5_000
    rate: int = 2_000
    before_s: float = 3  # reading before the kill
    after_s: float = 10  # reading after it
    session_timeout_ms: int | None = None  # None: kiq's default


def run_failover(cfg: FailoverConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Three nodes, one killed under load: what readers going through the others saw."""
    if cfg.keys < 1 or cfg.rate < 1:
        raise ConfigError("--keys and --rate must be positive")
    env = {}
    if cfg.session_timeout_ms is not None:
        env["KIQ_SERVE_SESSION_TIMEOUT_MS"] = str(cfg.session_timeout_ms)
    with reporter(progress, "failover") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        show.phase("starting 3 nodes")
        nodes = start_nodes(stack, 3, [f"{TABLE}={TOPIC}"], env)
        wait_settled(nodes)
        show.phase("catching up")
        wait_applied(nodes, TABLE, last)
        victim = next(n for n in nodes if n.node_id == VICTIM)
        lost = sorted(p for p, owner in actives(nodes[0], TABLE).items() if owner == VICTIM)
        rotation = [n.url for n in nodes]
        with ReaderLoad(lambda: rotation, TABLE, keys, rate=cfg.rate) as load:
            watch_reads(show, load)
            show.phase("reading", cfg.before_s)
            time.sleep(cfg.before_s)
            rotation = [n.url for n in nodes if n is not victim]  # out of rotation as it dies
            killed_at = time.monotonic()
            victim.kill()
            show.phase(f"{VICTIM} killed (-9), reading", cfg.after_s)
            time.sleep(cfg.after_s)
        stats = load.stats
    answered, unanswered = _recovery(stats, killed_at, lost, cfg.after_s)
    victim_prefix = victim.url + "/"
    to_victim = [f for f in stats.failures if f[1].startswith(victim_prefix)]
    after = [(sent, done, stale) for sent, done, _, stale in stats.answered if sent >= killed_at]
    stale_after = [done for _, done, stale in after if stale]
    return {
        "scenario": "failover",
        "keys": cfg.keys,
        "rate": cfg.rate,
        "requests": stats.sent,
        "failed_requests": len(stats.failures),
        # Sent to the victim as it died (picked from the rotation before it left):
        # no server can answer those, a client retry would. The rest went through
        # a surviving node: kiq's to answer.
        "failed_in_flight_to_victim": len(to_victim),
        "failed_via_survivors": len(stats.failures) - len(to_victim),
        "rate_achieved": round(stats.sent / (cfg.before_s + cfg.after_s), 1),
        "victim_partitions": len(lost),
        "seconds_until_all_answered": round(answered, 3),
        "partitions_never_answered": unanswered,
        "stale_answers": stats.stale,
        "seconds_until_not_stale": round(max(stale_after) - killed_at, 3) if stale_after else 0.0,
        "stale_at_end": bool(after) and max(after)[2],
    }


def _recovery(
    stats: LoadStats, killed_at: float, partitions: list[int], window_s: float
) -> tuple[float, int]:
    """Max over ``partitions`` of kill → first good answer sent after it; and how many had none.

    A partition with no answer at all counts as the whole window, so the figure
    never looks better than what was seen.
    """
    first: dict[int, float] = {}
    for sent, done, partition, _ in stats.answered:
        if sent >= killed_at and partition in partitions:
            first[partition] = min(first.get(partition, done), done)
    missing = [p for p in partitions if p not in first]
    waits = [first[p] - killed_at for p in first] + [window_s] * len(missing)
    return (max(waits) if waits else 0.0), len(missing)

"""Chaos scenarios done to serving nodes, under readers going through the nodes left standing.

Three nodes serve a 12-partition table (standby replicas: kiq's default, one);
``readers`` concurrent readers send ``rate`` GETs a second to the nodes in the
rotation, as a load balancer would (a node leaves it before it is stopped on
purpose, or at once when it dies). During the fault, fresh values are written
for ``MARKED_KEYS`` keys (every partition); after it, each must be served by
every node: ``records_lost`` counts those that never are.

- ``sigstop``: n2 is stopped (SIGSTOP) for ``fault_s`` and continued; readers
  never go through it. It still owns partitions until the group's session times
  out, so lookups forwarded to it are what hedging (``peers/hedging.py``)
  answers elsewhere. Recovery: SIGCONT → the three nodes settled again.
- ``kill``: n2 is killed (-9). Recovery: the kill → the two survivors settled;
  then it is started again (``rejoin_s``: start → three settled).
- ``rolling-restart``: each node in turn leaves the rotation, gets SIGTERM, is
  started again, waited for (ready, then settled with its standbys serving too:
  readiness covers only what a node owns) and rejoins the rotation.
  Recovery: the longest stop → settled of the three.
- ``add-remove``: a fourth node joins (start → four settled), takes reads for
  ``fault_s``, then leaves (SIGTERM → three settled). Recovery: the longer of the two.

Every scenario also reports the hedging counters the nodes' ``/metrics`` show
(forwarded lookups, hedges sent, won, lost, peers avoided) just before the
fault (``hedging_before_fault``: its cost under normal load) and at the end.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from kiq.bench.chaos import wait_markers, write_markers
from kiq.bench.cluster import start_nodes, wait_applied, wait_settled
from kiq.bench.dataset import TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, reporter
from kiq.bench.reader import LoadStats, ReaderLoad, watch_reads
from kiq.bench.stack import CLUSTER, Stack, local_stack
from kiq.errors import ConfigError, KiqError
from kiq.runtime.nodes import LocalNode

TOPIC = "bench-chaos-nodes"
NODE_SCENARIOS = ("sigstop", "kill", "rolling-restart", "add-remove")
VICTIM = "n2"
# sigstop, kill: reads sent to the victim itself finish before it stops (none can answer
# those once it has: a client's retry would); every read counted went through another node.
IN_FLIGHT_GRACE_S = 0.5
MARKED_KEYS = 24  # two a partition on average: every partition gets a fresh value


@dataclass(frozen=True)
class NodeChaosConfig:
    scenario: str
    fault_s: float = 10.0  # sigstop: stopped for; kill: reads after the kill; add-remove: joined
    keys: int = 2_000
    rate: int = 800
    readers: int = 8
    before_s: float = 5.0  # reads before the fault
    after_s: float = 3.0  # reads after recovery
    session_timeout_ms: int | None = None  # None: kiq's default
    visible_within_s: float = 30.0


class Rotation:
    """The nodes the readers go through; changed by the scenario as a load balancer would."""

    def __init__(self, nodes: list[LocalNode]) -> None:
        self.urls = [n.url for n in nodes]

    def __call__(self) -> list[str]:
        return self.urls

    def without(self, node: LocalNode) -> None:
        self.urls = [u for u in self.urls if u != node.url]

    def adding(self, node: LocalNode) -> None:
        self.urls = [*self.urls, node.url]


def run_node_chaos(cfg: NodeChaosConfig, progress: Reporter | None = None) -> dict[str, object]:
    if cfg.scenario not in NODE_SCENARIOS:
        raise ConfigError(f"{cfg.scenario!r}: choose one of {', '.join(NODE_SCENARIOS)}")
    if cfg.keys < MARKED_KEYS or cfg.rate < 1 or cfg.readers < 1 or cfg.fault_s < 0:
        raise ConfigError(f"--keys must be at least {MARKED_KEYS}, --rate and --readers positive")
    env = {}
    if cfg.session_timeout_ms is not None:
        env["KIQ_SERVE_SESSION_TIMEOUT_MS"] = str(cfg.session_timeout_ms)
    scenario = _SCENARIOS[cfg.scenario]
    with reporter(progress, cfg.scenario) as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        show.phase("starting 3 nodes")
        nodes = start_nodes(stack, 3, [f"{TABLE}={TOPIC}"], env)
        _settled_after(nodes, time.monotonic())
        show.phase("catching up")
        wait_applied(nodes, TABLE, last)
        rotation = Rotation(nodes)
        run = _Run(stack, nodes, rotation, cfg, env, show)
        with ReaderLoad(rotation, TABLE, keys, cfg.rate, concurrency=cfg.readers) as load:
            watch_reads(show, load)
            show.watch("nodes in rotation", lambda: len(rotation.urls))
            show.phase("reading before the fault", cfg.before_s)
            time.sleep(cfg.before_s)
            normal = _hedging(run.live())  # before any fault: what hedging costs normally
            figures = scenario(run)
            if isinstance(recovery := figures.get("recovery_s"), float):
                show.set("recovery", recovery, "s")
            show.phase("reading after recovery", cfg.after_s)
            time.sleep(cfg.after_s)
        show.phase("checking the fresh values on every node")
        lost = wait_markers(run.live(), keys[:MARKED_KEYS], run.marker, cfg.visible_within_s)
        show.set("records lost", lost)
        hedging = _hedging(run.live())
    return {
        "scenario": cfg.scenario,
        "rate": cfg.rate,
        "readers": cfg.readers,
        "fault_s": cfg.fault_s,
        **_reads(load.stats, run.fault_at),
        "records_lost": lost,
        **figures,
        "hedging_before_fault": normal,
        "hedging": hedging,
    }


class _Run:
    """What a scenario works with: the stack, its nodes, the rotation, the marker written."""

    def __init__(
        self,
        stack: Stack,
        nodes: list[LocalNode],
        rotation: Rotation,
        cfg: NodeChaosConfig,
        env: dict[str, str],
        show: Reporter,
    ) -> None:
        self.stack = stack
        self.nodes = nodes
        self.rotation = rotation
        self.cfg = cfg
        self.env = env
        self.show = show
        self.marker = ""
        self.fault_at = 0.0  # monotonic time the fault was done

    def victim(self) -> LocalNode:
        return next(n for n in self.nodes if n.node_id == VICTIM)

    def live(self) -> list[LocalNode]:
        return [n for n in self.nodes if n.running]

    def write(self, marker: str) -> None:
        """Fresh values for the marked keys, during the fault."""
        self.marker = marker
        keys = [key_of(i) for i in range(MARKED_KEYS)]
        write_markers(self.stack.bootstrap, TOPIC, keys, marker, self.cfg.visible_within_s)


def _settled_after(nodes: list[LocalNode], since: float, timeout_s: float = 120) -> float:
    """Seconds from ``since`` until the nodes agree and every replica they hold serves.

    Readiness (``/v1/health/ready``) covers the partitions a node owns, not its
    standbys: a standby still restoring is no fallback, so a rolling restart that
    moved on at readiness alone could stop a partition's only serving replica.
    """
    wait_settled(nodes, timeout_s)
    deadline = time.monotonic() + timeout_s
    restoring = ["?"]
    while time.monotonic() < deadline:
        restoring = [r for n in nodes for r in _restoring(n)]
        if not restoring:
            return round(time.monotonic() - since, 2)
        time.sleep(0.1)
    raise KiqError(f"replicas still restoring after {timeout_s:.0f}s: {restoring[:5]}")


def _restoring(node: LocalNode) -> list[str]:
    """The replicas ``node``'s view gives it that do not serve yet."""
    out = []
    for p in node.metadata()["tables"][TABLE]["partitions"]:
        if node.node_id in (p["active"], *p["standbys"]):
            local = p["local"]
            if local is None or local["state"] not in ("active", "standby"):
                out.append(f"{node.node_id}:{TABLE}[{p['partition']}]")
    return out


def _sigstop(run: _Run) -> dict[str, object]:
    victim = run.victim()
    run.rotation.without(victim)  # readers go through the others only: kiq's to answer
    time.sleep(IN_FLIGHT_GRACE_S)  # what was sent to it directly is answered first
    pid = victim.proc.pid if victim.proc is not None else None
    assert pid is not None
    run.fault_at = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        run.show.phase(f"{VICTIM} stopped (SIGSTOP)", run.cfg.fault_s, since=run.fault_at)
        time.sleep(run.cfg.fault_s / 2)
        run.write("sigstop")
        time.sleep(run.cfg.fault_s / 2)
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    run.show.phase(f"{VICTIM} continued: settling")
    recovery = _settled_after(run.nodes, resumed)
    run.rotation.adding(victim)
    return {"stopped_s": run.cfg.fault_s, "recovery_s": recovery}


def _kill(run: _Run) -> dict[str, object]:
    victim = run.victim()
    run.rotation.without(victim)  # readers go through the others only: kiq's to answer
    time.sleep(IN_FLIGHT_GRACE_S)  # what was sent to it directly is answered first
    killed = run.fault_at = time.monotonic()
    victim.kill()
    run.show.phase(f"{VICTIM} killed (-9): the survivors settling", run.cfg.fault_s, since=killed)
    run.write("kill")
    survivors = [n for n in run.nodes if n is not victim]
    recovery = _settled_after(survivors, killed)
    run.show.phase(f"{VICTIM} down", run.cfg.fault_s, since=killed)
    time.sleep(max(0.0, run.cfg.fault_s - (time.monotonic() - killed)))
    run.show.phase(f"{VICTIM} rejoining")
    started = time.monotonic()
    victim.start()
    rejoin = _settled_after(run.nodes, started)
    run.rotation.adding(victim)
    return {"recovery_s": recovery, "rejoin_s": rejoin}


def _rolling_restart(run: _Run) -> dict[str, object]:
    per_node: dict[str, dict[str, float]] = {}
    run.fault_at = time.monotonic()
    for node in run.nodes:
        run.show.phase(f"restart {node.node_id}")
        run.rotation.without(node)
        stopped = time.monotonic()
        node.stop()
        if not run.marker:
            run.write("rolling-restart")  # while the first node is down
        node.start()
        node.wait_ready()
        ready = round(time.monotonic() - stopped, 2)  # then its standbys too, before the next
        per_node[node.node_id] = {"ready_s": ready, "settled_s": _settled_after(run.nodes, stopped)}
        run.rotation.adding(node)
    worst = max(n["settled_s"] for n in per_node.values())
    return {"recovery_s": worst, "restarts": per_node}


def _add_remove(run: _Run) -> dict[str, object]:
    stack = run.stack
    node = stack.node(
        "n4", [f"{TABLE}={TOPIC}"], extra_args=["--cluster", CLUSTER], env=dict(run.env)
    )
    run.nodes.append(node)
    started = run.fault_at = time.monotonic()
    run.show.phase("n4 joining")
    node.start()
    join = _settled_after(run.nodes, started)
    run.rotation.adding(node)
    run.show.phase("n4 serving", run.cfg.fault_s)
    run.write("add-remove")
    time.sleep(run.cfg.fault_s)
    run.show.phase("n4 leaving")
    run.rotation.without(node)
    stopped = time.monotonic()
    node.stop()
    run.nodes.remove(node)
    leave = _settled_after(run.nodes, stopped)
    return {"recovery_s": max(join, leave), "join_s": join, "leave_s": leave}


_SCENARIOS: dict[str, Callable[[_Run], dict[str, object]]] = {
    "sigstop": _sigstop,
    "kill": _kill,
    "rolling-restart": _rolling_restart,
    "add-remove": _add_remove,
}


def _reads(stats: LoadStats, fault_at: float) -> dict[str, object]:
    slowest = sorted(stats.answered, key=lambda a: a[0] - a[1])[:5]
    return {
        **stats.summary(),
        # (seconds from the fault to the read, its ms, its partition)
        "slowest_reads": [
            (round(sent - fault_at, 2), round(1000 * (done - sent), 1), partition)
            for sent, done, partition, _ in slowest
        ],
    }


_HEDGE_SERIES = {
    "kiq_forward_lookups_total": "forwarded",
    'kiq_forward_hedges_total{to="peer"}': "hedged_to_peer",
    'kiq_forward_hedges_total{to="local"}': "hedged_to_local",
    'kiq_forward_hedge_outcomes_total{outcome="won"}': "won",
    'kiq_forward_hedge_outcomes_total{outcome="lost"}': "lost",
    "kiq_peer_suspected_total": "peers_avoided",
}


def _hedging(nodes: list[LocalNode]) -> dict[str, object]:
    """The hedging counters summed over ``nodes``, and hedges per forwarded lookup."""
    totals = dict.fromkeys(_HEDGE_SERIES.values(), 0)
    for node in nodes:
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name in _HEDGE_SERIES:
                totals[_HEDGE_SERIES[name]] += int(float(value))
    hedged = totals["hedged_to_peer"] + totals["hedged_to_local"]
    ratio = hedged / totals["forwarded"] if totals["forwarded"] else 0.0
    return {**totals, "hedged_per_forwarded": round(ratio, 4)}

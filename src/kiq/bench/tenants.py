"""Tenants: one tenant far past its quota, and what that costs another tenant's lookups.

One node with authentication serves ``keys`` quotes, every tenant (the token's ``sub``)
held to ``quota`` requests a second by ``[limits.tenants]``. Two wrk runs ask at a set
pace (each connection waits after an answer, wrk's ``delay()``): ``blue`` within its
quota, ``red`` at ``flood`` times its quota. Blue is measured alone and beside red's
flood, in ``rounds`` interleaved rounds (a busy machine's drift spread over both ways
alike). ``p99_vs_alone`` is blue's p99 beside the flood over its p99 alone: what one
tenant's excess costs the others. Red's answers are counted: 200s up to its quota, 429s
past it.

A third tenant, ``green``, asks ``background`` requests a second in both ways, within a
quota of its own: a node serving many tenants, not an idle one. On an idle core blue's
requests each wake the node up, and the flood only made them faster.

As in ``kiq bench scans``, the node is pinned to the last core and the load generators
to the others (``pinned``), so the figure is the node's and not the machine's scheduler.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kiq.bench.auth import bench_auth
from kiq.bench.cluster import one_node
from kiq.bench.dataset import TABLE, key_of, load_quotes
from kiq.bench.progress import Reporter, reporter
from kiq.bench.stack import local_stack
from kiq.bench.wrk import WrkResult, run_wrk, write_script, wrk_executable
from kiq.errors import ConfigError, KiqError

TOPIC = "bench-tenants"
BLUE_CONNECTIONS = 4
# wrk waits whole milliseconds: red's and green's connections each wait this long after
# an answer, and there are as many as their pace needs (``_connections``).
PACE_MS = 4


@dataclass(frozen=True)
class TenantsConfig:
    keys: int = 10_000
    quota: float = 200.0  # requests/s of every tenant
    flood: float = 10.0  # red asks this many times its quota
    blue_share: float = 0.5  # blue asks this share of its quota
    background: float = 2_000.0  # green's requests/s, in both ways (0: none)
    rounds: int = 4
    duration_s: float = 8.0  # of each way in each round
    pin: bool = True


def run_tenants(cfg: TenantsConfig, progress: Reporter | None = None) -> dict[str, object]:
    """Blue alone and beside red's flood, interleaved: both ways' figures and red's answers."""
    if cfg.keys < 1 or cfg.quota <= 0 or cfg.flood <= 1 or cfg.rounds < 1:
        raise ConfigError("--keys, --quota and --rounds must be positive, --flood above 1")
    if not 0 < cfg.blue_share <= 1 or cfg.duration_s < 1:
        raise ConfigError("--blue-share must be in (0, 1], --duration at least 1 s")
    wrk_executable()
    with reporter(progress, "tenants") as show, local_stack(progress=show) as stack:
        keys = [key_of(i) for i in range(cfg.keys)]
        show.phase(f"loading {cfg.keys:,} keys")
        last = load_quotes(stack.bootstrap, TOPIC, keys)
        auth = bench_auth(stack.home / "secrets")
        quotas = {"green": {"rate": 2 * cfg.background}} if cfg.background else {}
        tenants = {"rate": cfg.quota, "quotas": quotas}
        env = auth.env | {"KIQ_LIMITS_TENANTS": json.dumps(tenants)}
        node, pinned = one_node(
            stack, show, [f"{TABLE}={TOPIC}"], last, cfg.pin, env, auth.authorization
        )
        directory = stack.home / "wrk-tenants"
        directory.mkdir(parents=True, exist_ok=True)
        targets = [("127.0.0.1", node.port)]
        paths = [[f"/v1/tables/{TABLE}/keys/{k}" for k in keys]]
        blue_rate, red_rate = cfg.quota * cfg.blue_share, cfg.quota * cfg.flood
        blue_script = write_script(
            directory, paths, targets, False, 1000 * BLUE_CONNECTIONS / blue_rate, "blue"
        )
        red_script = write_script(directory, paths, targets, False, PACE_MS, "red")
        red_connections = _connections(red_rate)
        green_script = write_script(directory, paths, targets, False, PACE_MS, "green")
        green_header = [f"Authorization: {auth.authorization_for('green')}"]
        blue_header = [f"Authorization: {auth.authorization_for('blue')}"]
        red_header = [f"Authorization: {auth.authorization_for('red')}"]

        def blue(seconds: float) -> WrkResult:
            return run_wrk(blue_script, targets, BLUE_CONNECTIONS, seconds, blue_header)

        def red(into: list[WrkResult], seconds: float) -> None:
            into.append(run_wrk(red_script, targets, red_connections, seconds, red_header))

        def green(stop: threading.Event) -> None:
            """Green's steady requests until ``stop``, in runs of a few seconds."""
            while cfg.background and not stop.is_set():
                run_wrk(green_script, targets, _connections(cfg.background), 3, green_header)

        show.phase("warming up", 4)
        red([], 2)
        blue(2)
        alone: list[WrkResult] = []
        beside: list[WrkResult] = []
        floods: list[WrkResult] = []
        stop = threading.Event()
        background = threading.Thread(target=green, args=(stop,))
        background.start()
        try:
            threading.Event().wait(1)
            _rounds(cfg, blue, red, alone, beside, floods, show)
        finally:
            stop.set()
            background.join(60)
    failed = sum(r.errors for r in alone + beside)
    if failed:
        raise KiqError(f"blue, within its quota, got {failed} errors or refusals")
    red_requests = sum(r.requests for r in floods)
    red_refused = sum(r.non_2xx for r in floods)
    red_seconds = len(floods) * (cfg.duration_s + 2)
    alone_p99, beside_p99 = _mean(r.p99_ms for r in alone), _mean(r.p99_ms for r in beside)
    return {
        "scenario": "tenants",
        "pinned": pinned,
        "quota_per_s": cfg.quota,
        "rounds": cfg.rounds,
        "duration_s": cfg.duration_s,
        "blue_rps": round(_mean(r.rps for r in alone + beside), 1),
        "blue_alone_p50_ms": round(_mean(r.p50_ms for r in alone), 3),
        "blue_alone_p99_ms": round(alone_p99, 3),
        "blue_beside_p50_ms": round(_mean(r.p50_ms for r in beside), 3),
        "blue_beside_p99_ms": round(beside_p99, 3),
        "blue_alone_p99_rounds_ms": [r.p99_ms for r in alone],
        "blue_beside_p99_rounds_ms": [r.p99_ms for r in beside],
        "p99_vs_alone": round(beside_p99 / alone_p99, 3) if alone_p99 else None,
        "red_asked_per_s": round(red_requests / red_seconds, 1),
        "red_asked_vs_quota": round(red_requests / red_seconds / cfg.quota, 2),
        "red_answered_per_s": round((red_requests - red_refused) / red_seconds, 1),
        "red_refused": red_refused,
        "red_socket_errors": sum(r.socket_errors for r in floods),
    }


def _rounds(
    cfg: TenantsConfig,
    blue: Callable[[float], WrkResult],
    red: Callable[[list[WrkResult], float], None],
    alone: list[WrkResult],
    beside: list[WrkResult],
    floods: list[WrkResult],
    show: Reporter,
) -> None:
    """Blue alone, then blue beside red's flood, ``cfg.rounds`` times."""
    for round_ in range(1, cfg.rounds + 1):
        show.phase(f"round {round_}/{cfg.rounds}: blue alone", cfg.duration_s)
        alone.append(blue(cfg.duration_s))
        show.phase(f"round {round_}/{cfg.rounds}: blue beside red's flood", cfg.duration_s)
        flooded: list[WrkResult] = []
        # A second longer on each side than blue's run: all of blue's is beside it.
        flooding = threading.Thread(target=red, args=(flooded, cfg.duration_s + 2))
        flooding.start()
        threading.Event().wait(1)
        beside.append(blue(cfg.duration_s))
        flooding.join(cfg.duration_s + 90)
        if not flooded:
            raise KiqError("red's wrk run did not finish")
        floods.append(flooded[0])
        show.set("blue p99 alone", _mean(r.p99_ms for r in alone), "ms")
        show.set("blue p99 beside", _mean(r.p99_ms for r in beside), "ms")


def _connections(rate: float) -> int:
    """wrk connections that ask ``rate`` requests a second, each waiting ``PACE_MS``
    after an answer (its own time and the timer's slack counted as another millisecond)."""
    return max(1, math.ceil(rate * (PACE_MS + 1) / 1000))


def _mean(values: Iterable[float]) -> float:
    return statistics.fmean(values)

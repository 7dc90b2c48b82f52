"""Serving nodes for a benchmark: started on a stack, settled, caught up, asked who owns what.

Like the integration tests' ``Cluster``, but built on :class:`kiq.bench.stack.Stack`
so the stack stops every node, and reading only the HTTP API, as any client would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kiq.bench.progress import Reporter
from kiq.bench.stack import CLUSTER, Stack
from kiq.bench.stats import with_children
from kiq.errors import KiqError
from kiq.runtime.nodes import LocalNode


def start_nodes(
    stack: Stack,
    count: int,
    tables: list[str],
    env: dict[str, str] | None = None,
    authorization: str | None = None,
    prefix: str = "n",
    workers: int = 1,
) -> list[LocalNode]:
    """``count`` nodes n1..nN (``prefix`` for n) in one cluster; registered with the stack
    before they start. ``workers``: processes answering each node's port (``--workers``).

    ``authorization``: what ``metadata()`` sends, for nodes started with authentication.
    """
    nodes = []
    for i in range(1, count + 1):
        node = stack.node(
            f"{prefix}{i}",
            tables,
            extra_args=["--cluster", CLUSTER],
            env=dict(env or {}),
            authorization=authorization,
            workers=workers,
        )
        nodes.append(node.start())
    return nodes


def wait_settled(nodes: list[LocalNode], timeout_s: float = 120) -> None:
    """Every node ready and all agreeing on one assignment that gives each node partitions."""
    for node in nodes:
        node.wait_ready(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        views = [_actives_by_table(n) for n in nodes]
        owners = {owner for view in views for owner in view.values()}
        if all(v == views[0] for v in views) and owners == {n.node_id for n in nodes}:
            return
        time.sleep(0.2)
    raise KiqError(f"the {len(nodes)} nodes did not agree on an assignment in {timeout_s:.0f}s")


def wait_applied(
    nodes: list[LocalNode], table: str, last_offsets: dict[int, int], timeout_s: float = 120
) -> None:
    """Until every replica on every live node has applied the offsets the load produced."""
    deadline = time.monotonic() + timeout_s
    behind = -1
    while time.monotonic() < deadline:
        behind = 0
        for node in nodes:
            if not node.running:
                continue
            for p in node.metadata()["tables"][table]["partitions"]:
                local = p["local"]
                if local and local["applied_offset"] < last_offsets.get(p["partition"], -1):
                    behind += 1
        if not behind:
            return
        time.sleep(0.2)
    raise KiqError(f"{behind} replicas of {table} still behind after {timeout_s:.0f}s")


def actives(node: LocalNode, table: str) -> dict[int, str]:
    """Partition → active node id, as ``node`` sees it."""
    parts = node.metadata()["tables"][table]["partitions"]
    return {p["partition"]: p["active"] for p in parts if p["active"] is not None}


def restored_records(node: LocalNode, table: str) -> tuple[int, float]:
    """Records ``node``'s replicas of ``table`` applied since they were opened, and the
    seconds the restore took: from the first record any of them applied to the last one
    caught up, on the wall clock they report (0 when none applied any). Not from their
    opening: how soon the first fetch comes back moved that by up to half a second between
    runs of the same restore."""
    local = [p["local"] for p in node.metadata()["tables"][table]["partitions"] if p["local"]]
    began = [r["restore_began_at_ms"] for r in local if r["restore_began_at_ms"] is not None]
    ended = [r["caught_up_at_ms"] for r in local if r["caught_up_at_ms"] is not None]
    took = (max(ended) - min(began)) / 1000 if began and ended else 0.0
    return sum(r["restored_records"] for r in local), max(0.0, took)


def _actives_by_table(node: LocalNode) -> dict[tuple[str, int], str]:
    return {
        (name, p["partition"]): p["active"]
        for name, table in node.metadata()["tables"].items()
        for p in table["partitions"]
        if p["active"] is not None
    }


def one_node(
    stack: Stack,
    show: Reporter,
    tables: list[str],
    last: dict[int, int],
    pin: bool,
    env: dict[str, str] | None = None,
    authorization: str | None = None,
) -> tuple[LocalNode, bool]:
    """One node serving ``tables`` (``table=topic``), settled and caught up to ``last``
    (``wait_applied``'s, of the first table), then pinned apart from the load when ``pin``:
    the node and whether it was pinned (``pin_apart``)."""
    show.phase("starting a node")
    nodes = start_nodes(stack, 1, tables, env, authorization)
    wait_settled(nodes)
    show.phase("catching up")
    wait_applied(nodes, tables[0].split("=", 1)[0], last)
    node = nodes[0]
    pids = [pid for pid in with_children([node.proc.pid if node.proc else None]) if pid]
    return node, pin and pin_apart(pids)


def pin_apart(node_pids: list[int]) -> bool:
    """The node's threads onto the last core, this process (and what it starts) onto the
    others; False, and nothing moved, on a machine of one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return False
    for pid in node_pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), {cores[-1]})
            except OSError:  # a thread that ended meanwhile
                continue
    os.sched_setaffinity(0, set(cores[:-1]))
    return True

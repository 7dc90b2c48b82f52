"""What a node says about itself and the cluster: tables, metadata, health, metrics.

/v1/metadata carries enough for a smart client or a reverse proxy to route
requests straight to the right node: every partition's active and standbys with
their URLs, and this node's own replicas with offsets and lag.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from prometheus_client import generate_latest

from kiq.node import Node
from kiq.routing import Forwarder, Reply


def tables(node: Node) -> bytes:
    return orjson.dumps(
        {
            "tables": [
                {
                    "name": t.spec.name,
                    "topic": t.spec.topic,
                    "partitions": t.partitions,
                    "format": t.spec.format,
                    "store": t.spec.store,
                    "standby_replicas": t.spec.standby_replicas,
                    "global": t.spec.global_,
                }
                for t in node.tables.values()
            ]
        }
    )


async def metadata(node: Node, forwarder: Forwarder, cluster: bool) -> bytes:
    """This node's view; with ``cluster``, every replica's state and lag asked of its node."""
    local = metadata_of(node)
    if not cluster:
        return orjson.dumps(local)
    peers = [m for m in node.view.members.values() if m.node_id != node.node_id]
    answers = await asyncio.gather(
        *(forwarder.send("GET", f"{m.url}/v1/metadata") for m in peers), return_exceptions=True
    )
    by_node = {node.node_id: local}
    for member, answer in zip(peers, answers, strict=True):
        if isinstance(answer, Reply) and answer.status == 200:
            by_node[member.node_id] = orjson.loads(answer.body)
    for name, table in local["tables"].items():
        for part in table["partitions"]:
            replicas = []
            for node_id in [part["active"], *part["standbys"]]:
                if node_id is None:
                    continue
                theirs = by_node.get(node_id)
                state = None
                if theirs is not None:
                    state = theirs["tables"][name]["partitions"][part["partition"]]["local"]
                replicas.append({"node": node_id, "reachable": theirs is not None, "local": state})
            part["replicas"] = replicas
    return orjson.dumps(local)


def metadata_of(node: Node) -> dict[str, Any]:
    view = node.view
    out: dict[str, Any] = {
        "node": {"id": node.node_id, "url": node.url},
        "view_version": view.version,
        "nodes": [{"id": m.node_id, "url": m.url} for m in sorted(view.members.values())],
        "tables": {},
    }
    for name, runtime in node.tables.items():
        parts = []
        for p in range(runtime.partitions):
            reps = view.of(name, p)
            local = node.replica(name, p)
            parts.append(
                {
                    "partition": p,
                    "active": reps.active,
                    "standbys": list(reps.standbys),
                    "urls": {n: view.url(n) for n in reps.all},
                    "local": local.describe() if local else None,
                }
            )
        out["tables"][name] = {"topic": runtime.spec.topic, "partitions": parts}
    return out


def ready(node: Node) -> tuple[int, bytes]:
    ok, reason = node.is_ready()
    return (200 if ok else 503), orjson.dumps({"ready": ok, "reason": reason})


def metrics(node: Node) -> bytes:
    return generate_latest(node.metrics.registry)

"""What a node says about itself and the cluster: tables, metadata, health, metrics.

/v1/metadata carries enough for a smart client or a reverse proxy to route
requests straight to the right node: every partition's active and standbys with
their URLs, and this node's own replicas with offsets and lag.
"""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import generate_latest

from kiq.node import Node


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


def metadata(node: Node) -> bytes:
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
    return orjson.dumps(out)


def ready(node: Node) -> tuple[int, bytes]:
    ok, reason = node.is_ready()
    return (200 if ok else 503), orjson.dumps({"ready": ok, "reason": reason})


def metrics(node: Node) -> bytes:
    return generate_latest(node.metrics.registry)

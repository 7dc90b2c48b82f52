"""What a node says about itself and the cluster: tables, metadata, health, metrics.

/v1/metadata carries enough for a smart client or a reverse proxy to route
requests straight to the right node: every partition's active and standbys with
their URLs, and this node's own replicas with offsets and lag. It names only the
members this node has proven (``proven_members``): a client sends its token where
the metadata points.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import orjson
from prometheus_client import generate_latest

from kiq.cluster import Member
from kiq.node import NodeView
from kiq.ops.proven import proven_members
from kiq.peers import NodeStatus, PeerError, Peers
from kiq.peers.wire import ReplicaStatus, encode

log = logging.getLogger(__name__)


def tables(node: NodeView, admin: bool = False) -> bytes:
    """The tables by their own names, each as its current version; ``versions`` lists every
    version this node serves (``GET /v1/tables/{table}/versions`` says more). Checkpoint
    paths (a path on the pipeline's machine) only for an ``admin`` caller."""
    return orjson.dumps(
        {
            "tables": [
                {
                    "name": name,
                    "version": t.spec.version,
                    "versions": sorted(node.versions_of(name)),
                    "topic": t.spec.topic,
                    "partitions": t.partitions,
                    "format": t.spec.format,
                    "store": t.spec.store,
                    "standby_replicas": t.spec.standby_replicas,
                    "global": t.spec.global_,
                    "sep": t.spec.key_separator,
                    # how its pipeline declared it (the table catalog); null: a plain topic
                    "declared": _declared(t.spec.declared, admin),
                }
                for name, t in sorted(node.current.items())
            ]
        }
    )


def _declared(declared: Mapping[str, object] | None, admin: bool) -> dict[str, object] | None:
    if declared is None:
        return None
    return dict(declared) if admin else {k: v for k, v in declared.items() if k != "checkpoint"}


async def metadata(
    node: NodeView, peers: Peers, cluster: bool, authorization: str | None = None
) -> bytes:
    """This node's view, naming only the members it has proven (``proven_members``); with
    ``cluster``, every replica's state and lag asked of its node."""
    trusted = await proven_members(node, peers)
    local = metadata_of(node, trusted)
    if not cluster:
        return orjson.dumps(local)
    others = [m for m in trusted if m.node_id != node.node_id]
    answers = await asyncio.gather(*(_status(peers, m.url, authorization) for m in others))
    reachable = {node.node_id}
    states: dict[tuple[str, str, int], dict[str, Any]] = {}  # (node, table, partition) → state
    for member, answer in zip(others, answers, strict=True):
        if answer is not None:
            reachable.add(member.node_id)
            for r in answer.replicas:
                states[(member.node_id, r.table, r.partition)] = r.as_dict()
    for table in local["tables"].values():
        name = table["name"]  # the current version's, as its replicas are named
        for part in table["partitions"]:
            replicas = []
            for node_id in [part["active"], *part["standbys"]]:
                if node_id is None:
                    continue
                if node_id == node.node_id:
                    state = part["local"]
                else:
                    state = states.get((node_id, name, part["partition"]))
                seen = node_id in reachable
                replicas.append({"node": node_id, "reachable": seen, "local": state})
            part["replicas"] = replicas
    return orjson.dumps(local)


async def _status(peers: Peers, url: str, authorization: str | None) -> NodeStatus | None:
    try:
        return await peers.metadata(url, authorization)
    except PeerError as exc:
        log.info("metadata of %s unavailable: %s", url, exc)
        return None


def node_status(node: NodeView) -> bytes:
    """Another node's ``Peers.metadata``: this node's own replicas."""
    return encode(own_status(node))


def own_status(node: NodeView) -> NodeStatus:
    """This node's replicas, the version each table's name means here and every version
    it serves."""
    replicas = [
        ReplicaStatus.of(replica.describe())
        for name, runtime in list(node.tables.items())
        for p in range(runtime.partitions)
        if (replica := node.replica(name, p)) is not None
    ]
    current = {name: t.spec.version for name, t in list(node.current.items())}
    return NodeStatus(node.node_id, node.view.version, replicas, current, list(node.tables))


def metadata_of(node: NodeView, trusted: frozenset[Member]) -> dict[str, Any]:
    """``trusted``: the members that may be named (``proven_members``). Any other is left
    out, its node id and its URL: a partition's active that is not one is null, as when
    nobody holds it; ``unproven`` lists the node ids left out."""
    view = node.view
    named = {m.node_id: m.url for m in view.members.values() if m in trusted}
    named[node.node_id] = node.url
    unproven = sorted(n for n in view.members if n not in named)
    out: dict[str, Any] = {
        "node": {"id": node.node_id, "url": node.url},
        "view_version": view.version,
        "nodes": [{"id": n, "url": url} for n, url in sorted(named.items())],
        "unproven": unproven,
        "tables": {},
    }
    for table, runtime in sorted(node.current.items()):
        name = runtime.spec.name
        parts = []
        for p in range(runtime.partitions):
            reps = view.of(name, p)
            local = node.replica(name, p)
            active = reps.active if reps.active in named else None
            standbys = [n for n in reps.standbys if n in named]
            parts.append(
                {
                    "partition": p,
                    "active": active,
                    "standbys": standbys,
                    "urls": {n: named[n] for n in (active, *standbys) if n is not None},
                    "local": local.describe() if local else None,
                }
            )
        out["tables"][table] = {
            "topic": runtime.spec.topic,
            "name": name,
            "version": runtime.spec.version,
            "partitions": parts,
        }
    return out


def ready(node: NodeView, detail: bool = True) -> tuple[int, bytes]:
    """Ready or not; with ``detail``, why not (it names tables and store faults: on a node with
    authentication only an admin's token sees it, a load balancer's probe gets the status)."""
    ok, reason = node.is_ready()
    body = {"ready": ok, "reason": reason} if detail else {"ready": ok}
    return (200 if ok else 503), orjson.dumps(body)


def metrics(node: NodeView) -> bytes:
    return generate_latest(node.metrics.registry)

"""A table's versions across the cluster, the switch from one to another, and retiring one.

``GET /v1/tables/{table}/versions`` asks every node for its replicas (``Peers.metadata``)
and the pipelines' progress for how far each version's query has read, so one answer
says whether a version is complete: what ``kiq diff`` waits for, and what ``kiq switch``
checks before it moves the name. The switch itself is one record in the table catalog
(an ``Alias``), which every node follows (``kiq.node_catalog``); the answer comes once
every node reachable says it has moved. Retiring, in this order: refuses (nothing changed)
the current version, one whose pipeline runs, or when the catalog cannot be read; decides
from the whole catalog which topics may go (``kiq.tables.retire``: only those kiq derives
for the version and nothing else uses); writes the declaration's tombstone, which makes
every node close and delete its stores; deletes the topics decided, naming each one kept
(``topics_kept``, and a ``retire kept`` log line) rather than failing half-way.
The catalog and Kafka are reached through ``CatalogAdmin``, a collaborator the node's
composition root gives (the API talks to no broker itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.http_errors import ApiError, BadRequest, Unavailable, UnknownTable
from kiq.node import NodeView
from kiq.ops.admin import own_status
from kiq.ops.dashboard import PipelineProgress
from kiq.peers import NodeStatus, PeerError, Peers
from kiq.peers.wire import ReplicaStatus
from kiq.tables import TableRuntime
from kiq.tables.declared import catalog_key
from kiq.tables.retire import Kept, RetireTopics, input_topics, retire_topics, sharing_run
from kiq.tables.versions import Alias, run_name

log = logging.getLogger(__name__)

# How long a switch or a retire waits for every node to follow the catalog.
FOLLOW_WAIT_S = 10.0
_SERVING = "active"  # a replica's state when it answers reads


class Conflict(ApiError):
    status, code = 409, "conflict"


class CatalogAdmin(Protocol):
    """Where the API writes the table catalog and deletes topics (``kiq.node_build``)."""

    @property
    def app(self) -> str:
        """The application (``[app] name``) whose records this node follows."""
        ...

    async def put(self, topic: str, key: str, value: bytes | None) -> int:
        """Write one record (None: a tombstone) once the broker has it; its offset."""
        ...

    async def followed(self, offset: int, timeout_s: float) -> bool:
        """Whether this node's catalog follower passed ``offset`` within ``timeout_s``."""
        ...

    async def delete_topics(self, topics: Sequence[str]) -> list[str]:
        """Delete those of ``topics`` that exist; the ones deleted."""
        ...

    async def latest(self) -> Mapping[str, bytes]:
        """The catalog's latest record of every key, every application's (read to its end):
        what a retire checks a declaration's topics against."""
        ...


class VersionsApi:
    def __init__(
        self,
        node: NodeView,
        peers: Peers,
        catalog: CatalogAdmin | None,
        progress: PipelineProgress | None,
    ) -> None:
        self.node = node
        self.peers = peers
        self.catalog = catalog
        self.progress = progress

    # -- GET /v1/tables/{table}/versions ---------------------------------------------------

    async def describe(self, table: str, auth: str | None) -> dict[str, Any]:
        versions = self._versions(table)
        statuses = await self._statuses(auth)
        queries = await self._queries()
        current = self.node.current.get(table)
        return {
            "table": table,
            "current": current.spec.version if current is not None else None,
            "versions": [
                _describe(runtime, statuses, queries, self.node, current is runtime)
                for _, runtime in sorted(versions.items())
            ],
        }

    # -- POST /v1/tables/{table}/switch ----------------------------------------------------

    async def switch(
        self, table: str, version: str, force: bool, auth: str | None
    ) -> dict[str, Any]:
        catalog = self._catalog()
        versions = self._versions(table)
        target = _version(table, version, versions)
        statuses = await self._statuses(auth)
        missing = [
            node_id
            for node_id, status in statuses.items()
            if status is not None and target.spec.name not in status.tables
        ]
        if missing:
            raise Conflict(
                f"{table} {version} is not served by {', '.join(sorted(missing))} yet: wait "
                "until every node follows the catalog (kiq versions shows it), then switch"
            )
        if not force:
            described = _describe(target, statuses, await self._queries(), self.node, False)
            if not described["caught_up"]:
                raise Conflict(
                    f"{table} {version} has not caught up: {_why_behind(described)}. Wait "
                    "(kiq diff waits for it), or switch with force",
                    version=described,
                )
        previous = self.node.current[table].spec.version
        started = time.perf_counter()
        alias = Alias(
            table=table,
            version=version,
            app=catalog.app,
            switched_at_ms=int(time.time() * 1000),
            previous=previous,
        )
        offset = await catalog.put(CATALOG_TOPIC, alias.catalog_key, alias.encode())
        await catalog.followed(offset, FOLLOW_WAIT_S)
        nodes = await self._until(
            auth, lambda s: s.current.get(table), lambda seen: seen == version
        )
        took_ms = round((time.perf_counter() - started) * 1000, 1)
        log.info(
            "table switched table=%s from=%s to=%s took_ms=%s", table, previous, version, took_ms
        )
        return {
            "table": table,
            "version": version,
            "previous": previous,
            "took_ms": took_ms,
            "nodes": nodes,
        }

    # -- POST /v1/tables/{table}/retire ----------------------------------------------------

    async def retire(self, table: str, version: str, auth: str | None) -> dict[str, Any]:
        catalog = self._catalog()
        versions = self._versions(table)
        target = _version(table, version, versions)
        if self.node.current.get(table) is target:
            raise Conflict(
                f"{table} {version} is the version its name serves: switch to another first "
                f"(kiq switch {table} VERSION)"
            )
        declared = dict(target.spec.declared or {})
        pipeline = str(declared.get("pipeline") or "")
        run = run_name(pipeline, version) if pipeline else ""
        query = str(declared.get("query") or "")
        queries = await self._queries()
        for q in queries:
            if q.get("pipeline") == run and q.get("state") == "running" and not q.get("stale"):
                raise Conflict(
                    f"pipeline {run} still writes {table} {version} (query {q.get('query')} is "
                    "running): stop it first, then retire the version"
                )
        # Decided before anything changes: a catalog that cannot be read refuses the retire
        # whole. The declaration's topics are claims; only what kiq derives is deleted.
        name, key = target.spec.name, catalog_key(table, catalog.app, version)
        try:
            records = await catalog.latest()
        except Exception as exc:  # the broker's or the client's
            raise Unavailable(
                f"cannot read the table catalog to check what retiring {table} {version} may "
                f"delete ({exc or type(exc).__name__}): nothing was changed, try again"
            ) from exc
        topics = retire_topics(
            key=key,
            topic=target.spec.topic,
            version=version,
            dead_letters=_letters(declared),
            catalog=records,
            served={n: t.spec.topic for n, t in list(self.node.tables.items()) if n != name},
            inputs=input_topics(queries),
        )
        checkpoint_path = str(declared.get("checkpoint") or "")
        shared = sharing_run(
            key=key, app=catalog.app, run=run, checkpoint=checkpoint_path, catalog=records
        )
        offset = await catalog.put(CATALOG_TOPIC, key, None)
        await catalog.followed(offset, FOLLOW_WAIT_S)
        nodes = await self._until(
            auth, lambda s: name in s.tables, lambda present: not present, dropped=True
        )
        others = [
            t
            for t in list(self.node.tables.values())
            if t.spec.name != name
            and t.spec.declared is not None
            and run_name(str(t.spec.declared.get("pipeline") or ""), t.spec.version) == run
        ]
        last_of_run = bool(run) and not others and shared is None
        # The declaration is gone now: what follows is named in the answer, never an error.
        deleted, kept = await self._delete(catalog, topics)
        for k in kept:
            log.warning(
                "retire kept table=%s version=%s topic=%s reason=%r",
                table,
                version,
                k.topic,
                k.reason,
            )
        checkpoint = None
        if last_of_run:
            # The pipeline version is gone with its last table: its start and progress too.
            await catalog.put(CATALOG_TOPIC, f"pipeline:{catalog.app}/{run}", None)
            if query:
                await catalog.put(PROGRESS_TOPIC, f"{catalog.app}/{run}/{query}", None)
            checkpoint = checkpoint_path or None
        log.info("table retired table=%s version=%s topics=%s", table, version, ",".join(deleted))
        return {
            "table": table,
            "version": version,
            "run": run or None,
            "topics_deleted": deleted,
            "topics_kept": [k.as_json() for k in kept],
            "checkpoint": checkpoint,
            "last_of_run": last_of_run,
            "nodes": nodes,
        }

    async def _delete(
        self, catalog: CatalogAdmin, topics: RetireTopics
    ) -> tuple[list[str], list[Kept]]:
        """Deletes ``topics.delete``; what was deleted, and every topic kept (a deletion
        that failed is one, with the broker's reason)."""
        kept = list(topics.kept)
        if not topics.delete:
            return [], kept
        try:
            return await catalog.delete_topics(topics.delete), kept
        except Exception as exc:  # the broker's or the client's: said, not raised
            why = f"could not delete it: {exc or type(exc).__name__}; delete it by hand"
            return [], kept + [Kept(t, why) for t in topics.delete]

    # -- helpers ---------------------------------------------------------------------------

    def _catalog(self) -> CatalogAdmin:
        if self.catalog is None:
            raise Conflict("this node does not follow a table catalog: it cannot move versions")
        return self.catalog

    def _versions(self, table: str) -> dict[str, TableRuntime]:
        versions = self.node.versions_of(table)
        if not versions:
            raise UnknownTable(f"no table named {table!r}", table=table)
        return versions

    async def _statuses(self, auth: str | None) -> dict[str, NodeStatus | None]:
        """Every member's replicas (None: unreachable), this node's own included."""
        members = sorted(self.node.view.members.values())
        others = [m for m in members if m.node_id != self.node.node_id]
        answers = await asyncio.gather(*(self._status(m.url, auth) for m in others))
        found: dict[str, NodeStatus | None] = {self.node.node_id: own_status(self.node)}
        found.update({m.node_id: a for m, a in zip(others, answers, strict=True)})
        return found

    async def _status(self, url: str, auth: str | None) -> NodeStatus | None:
        try:
            return await self.peers.metadata(url, auth)
        except PeerError as exc:
            log.info("status of %s unavailable: %s", url, exc)
            return None

    async def _queries(self) -> list[dict[str, Any]]:
        if self.progress is None:
            return []
        summary = await asyncio.to_thread(self.progress.summary)
        return list(summary.get("queries") or [])

    async def _until(
        self, auth: str | None, seen: Any, done: Any, dropped: bool = False
    ) -> dict[str, Any]:
        """Asks every node until ``done(seen(status))`` holds for each reachable one, or
        ``FOLLOW_WAIT_S`` passes; what each said last (``dropped`` answers by name)."""
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while True:
            statuses = await self._statuses(auth)
            said: dict[str, Any] = {}
            for node_id, status in statuses.items():
                if status is None:
                    said[node_id] = "unreachable"
                    continue
                value = seen(status)
                if dropped:
                    said[node_id] = "dropped" if done(value) else "serving"
                else:
                    said[node_id] = value
            waiting = [n for n, s in statuses.items() if s is not None and not done(seen(s))]
            if not waiting or time.monotonic() > deadline:
                return said
            await asyncio.sleep(0.02)


def _letters(declared: Mapping[str, object]) -> list[str]:
    """The dead-letter topics a declaration records (none in a record older than that)."""
    found = declared.get("dead_letters")
    return [str(d) for d in found] if isinstance(found, list | tuple) else []


def _version(table: str, version: str, versions: Mapping[str, TableRuntime]) -> TableRuntime:
    if not version:
        raise BadRequest('name the version: {"version": "v2"}')
    target = versions.get(version)
    if target is None:
        raise Conflict(
            f"table {table!r} has no version {version!r}: it has {', '.join(sorted(versions))}"
        )
    return target


def _describe(
    runtime: TableRuntime,
    statuses: Mapping[str, NodeStatus | None],
    queries: Sequence[Mapping[str, Any]],
    node: NodeView,
    current: bool,
) -> dict[str, Any]:
    spec = runtime.spec
    name = spec.name
    declared = dict(spec.declared or {})
    pipeline = str(declared.get("pipeline") or "")
    run = run_name(pipeline, spec.version) if pipeline else ""
    query = str(declared.get("query") or "")
    by_node: dict[tuple[str, int], ReplicaStatus] = {}
    for node_id, status in statuses.items():
        for r in status.replicas if status is not None else ():
            if r.table == name:
                by_node[(node_id, r.partition)] = r
    keys = size = lag = 0
    serving = True
    for p in range(runtime.partitions):
        # A global table has no active in the view: every node answers from its own copy
        # (this one's counted, once).
        active = node.node_id if spec.global_ else node.view.of(name, p).active
        held = by_node.get((active, p)) if active is not None else None
        if held is None or held.state != _SERVING:
            serving = False
            continue
        keys += held.keys
        size += held.bytes
        lag += max(held.lag, 0)
    behind: int | None = None
    state: str | None = None
    for q in queries:
        if q.get("pipeline") == run and (not query or q.get("query") == query):
            state = "stale" if q.get("stale") else str(q.get("state"))
            behind = q.get("behind")
    nodes = sum(1 for s in statuses.values() if s is not None and name in s.tables)
    return {
        "version": spec.version,
        "current": current,
        "name": name,
        "topic": spec.topic,
        "pipeline": pipeline or None,
        "run": run or None,
        "query": query or None,
        "partitions": runtime.partitions,
        "keys": keys,
        "bytes": size,
        "lag": lag,
        "behind": behind,
        "pipeline_state": state,
        "serving": serving,
        "nodes": nodes,
        "caught_up": serving and lag == 0 and not behind,
    }


def _why_behind(described: Mapping[str, Any]) -> str:
    reasons = []
    if not described["serving"]:
        reasons.append("some partitions have no serving replica yet")
    if described["lag"]:
        reasons.append(f"the nodes have {described['lag']} records to apply")
    if described["behind"]:
        reasons.append(f"its pipeline has {described['behind']} input records to read")
    return "; ".join(reasons) or "not known"

"""In-process kiq nodes: real nodes, apps and stores; stand-ins where Kafka would be.

``Cluster`` plays the group coordinator (who is a member, who owns which
partition); the reader brings no records, and says the log ends where each
store stands, so a replica catches up as soon as it opens. Tests write values
straight into the replicas' stores. ``InProcessNetwork`` carries node-to-node
requests by calling the other node's ASGI app, and ``call`` is the client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson

from kiq.catalog import SHIPPED_ENDPOINTS
from kiq.cluster import Member
from kiq.cluster.members import encode_client_id
from kiq.kafka.group import GroupMemberInfo
from kiq.kafka.reader import Fetched
from kiq.metrics import NodeMetrics
from kiq.node import Node, store_opener
from kiq.partitioning import partition_for
from kiq.peers import Peers
from kiq.replicas import Materializer, ReplicaState
from kiq.routing import Router
from kiq.security import Security
from kiq.server import KiqApp, create_app
from kiq.settings import LimitsSettings, ServeSettings
from kiq.tables import TableRuntime, codec_for, parse_table

# -- Kafka's side -------------------------------------------------------------------


class Reader:
    """Brings no records; every partition's log ends where its replica stands."""

    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {}

    def assign(self, positions: Iterable[tuple[str, int, int]]) -> None:
        for topic, partition, offset in positions:
            self.assigned[(topic, partition)] = offset

    def unassign(self, partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            self.assigned.pop(tp, None)

    def consume(self, max_records: int = 5000, timeout_s: float = 0.05) -> Fetched:
        time.sleep(0.002)
        return Fetched()

    def end_offset(
        self, topic: str, partition: int, timeout_s: float = 2.0, fresh: bool = False
    ) -> int:
        return max(self.assigned.get((topic, partition), 0), 0)

    def close(self) -> None: ...


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, *record: Any) -> None:
        self.sent.append(record)

    def flush(self, timeout_s: float = 10.0) -> None: ...


class Cluster:
    """The group as its coordinator describes it: members, and the partitions each owns."""

    def __init__(self) -> None:
        self.members: dict[str, Member] = {}
        self.owned: dict[str, set[tuple[str, int]]] = {}
        self._changed: dict[str, threading.Event] = {}
        self.network: dict[str, Any] = {}  # URL → the node's app
        self.down: set[str] = set()
        self.transport = InProcessNetwork(self.network, self.down)  # every node's, shared

    def join(self, node_id: str, url: str) -> tuple[Group, threading.Event]:
        self.members[node_id] = Member(node_id, url)
        self.owned.setdefault(node_id, set())
        changed = self._changed[node_id] = threading.Event()
        return Group(self, node_id), changed

    def assign(self, node_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Gives ``node_id`` these (topic, partition)s, taking them from whoever had them."""
        moved = set(partitions)
        for owned in self.owned.values():
            owned -= moved
        self.owned[node_id] |= moved
        for changed in self._changed.values():
            changed.set()


class Group:
    def __init__(self, cluster: Cluster, node_id: str) -> None:
        self._cluster = cluster
        self._node_id = node_id
        self.joined = True

    @property
    def owned(self) -> frozenset[tuple[str, int]]:
        return frozenset(self._cluster.owned[self._node_id])

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_joined(self, timeout_s: float) -> bool:
        return self.joined

    def set_topics(self, topics: list[str]) -> None:
        self.topics = list(topics)

    def describe(self) -> list[GroupMemberInfo]:
        c = self._cluster
        return [
            GroupMemberInfo(encode_client_id(m.node_id, m.url), frozenset(c.owned.get(n, ())))
            for n, m in c.members.items()
        ]


# -- nodes -------------------------------------------------------------------------


@dataclass
class LocalNode:
    node: Node
    materializer: Materializer
    app: KiqApp
    peers: Peers
    writer: Writer

    def put(self, table: str, key: str, value: bytes, offset: int) -> int:
        """Writes ``key`` into this node's replica of its partition; returns the partition."""
        runtime = self.node.tables[table]
        partition = partition_for(runtime.spec.partition_key(key), runtime.partitions)
        replica = self.node.replica(table, partition)
        assert replica is not None, f"{self.node.node_id} holds no replica of {table}[{partition}]"
        replica.store.apply([(key.encode(), value, offset)], offset)
        # As the materializer would: the replica has applied what its store holds, the
        # log's end with it (a replica's position token is its applied offset).
        if offset >= replica.position:
            reader = self.materializer._reader  # type: ignore[attr-defined]
            end = reader.assigned.get((runtime.spec.topic, partition), 0)
            reader.assigned[(runtime.spec.topic, partition)] = max(end, offset + 1)
            replica.position = offset + 1
            replica.end_offset = max(replica.end_offset, offset + 1)
        return partition


def start_node(*args: Any, **kwargs: Any) -> LocalNode:
    """``make_node``'s node, started."""
    local = make_node(*args, **kwargs)
    local.node.start()
    return local


def make_node(
    data_dir: Path,
    cluster: Cluster,
    tables: dict[str, int],
    node_id: str = "n1",
    endpoints: Iterable[Any] = SHIPPED_ENDPOINTS,
    limits: LimitsSettings | None = None,
    security: Security | None = None,
    catalog: Any = None,
    progress: Any = None,
    **settings: Any,
) -> LocalNode:
    """A node serving ``tables``, its group seat taken in ``cluster``; not started.

    ``endpoints`` are the application's routes: functions taking a ``kiq.Routes``, or
    targets; the shipped stock and word-count routes unless given. With ``security``,
    the node checks tokens and peers as ``kiq serve --auth ...`` would. ``catalog`` and
    ``progress`` go to ``create_app`` (table versions' switch and retire, pipelines' progress).
    """
    url = f"http://{node_id}.test"
    conf = ServeSettings(
        node_id=node_id,
        advertise=url,
        data_dir=data_dir / node_id,
        tables=list(tables),
        **{"linger_s": 0.0, "view_refresh_ms": 50, **settings},
    )
    runtimes = {}
    for text, partitions in tables.items():
        spec = parse_table(text, default_standby=conf.standby_replicas)
        runtimes[spec.name] = TableRuntime(spec, codec_for(spec), partitions)
    metrics = NodeMetrics()
    materializer = Materializer(
        Reader(),  # type: ignore[arg-type]
        runtimes,
        store_opener(runtimes, conf.data_dir),
        DeadLetters(),  # type: ignore[arg-type]
        metrics,
        linger_s=conf.linger_s,
        watermark_interval_s=0.01,
    )
    group, changed = cluster.join(node_id, url)
    node = Node(conf, runtimes, materializer, metrics, group, changed)
    network = cluster.transport
    key = security.cluster if security is not None else None
    peers = Peers(node_id, Router(node_id), conf.forward_timeout_ms, key, transport=network)
    writer = Writer()
    app = create_app(
        node,
        writer,
        peers,
        start_node=False,
        endpoints=endpoints,
        limits=limits,
        security=security,
        catalog=catalog,
        progress=progress,
    )
    cluster.network[url] = app
    return LocalNode(node, materializer, app, peers, writer)


def wait_until(done: Callable[[], bool], timeout_s: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or done}")
        time.sleep(0.005)


def serving(node: Node, state: ReplicaState | None = None) -> Callable[[], bool]:
    """True once every partition the view gives ``node`` has a serving replica."""

    def check() -> bool:
        roles = node.view.roles_of(node.node_id)
        if not roles:
            return False
        for table, partition in roles:
            replica = node.replica(table, partition)
            if replica is None or not replica.state.serving:
                return False
            if state is not None and replica.state is not state:
                return False
        return True

    return check


class Writer:
    """Takes the API's writes: (partition 0, next offset) each, or raises ``fail``."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes]] = []
        self.fail: Exception | None = None
        self.closed = False

    async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        if self.fail is not None:
            raise self.fail
        self.records.append((topic, key, value))
        return 0, len(self.records) - 1

    def close(self) -> None:
        self.closed = True


# -- HTTP, in process ----------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def call(
    app: Any,
    method: str,
    target: str,
    body: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> Response:
    """One request to an ASGI app, as a server would make it: ``target`` is path?query."""
    raw_path, _, query = target.encode().partition(b"?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(raw_path.decode()),
        "raw_path": raw_path,
        "query_string": query,
        "root_path": "",
        "headers": list(headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict[str, Any]] = []
    delivered = False
    answered = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:  # a stream (a watch) waits for the client to go: it goes once answered
            await answered.wait()
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            answered.set()

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert [m["type"] for m in sent].count("http.response.start") == 1, sent
    out = {k.decode("latin-1"): v.decode("latin-1") for k, v in start.get("headers", [])}
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Response(start["status"], out, payload)


class InProcessNetwork:
    """The transport under ``Peers``, carried by calling the other node's ASGI app directly.

    ``apps`` maps each node's URL to its app; a URL in ``down`` cannot be reached.
    ``sent`` records each request as (node URL, path, headers).
    """

    def __init__(self, apps: dict[str, Any], down: set[str]) -> None:
        self.apps = apps
        self.down = down
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> tuple[int, bytes]:
        app = self.apps.get(base_url)
        if app is None or base_url in self.down:
            raise ConnectionError(f"{base_url}: unreachable")
        self.sent.append((base_url, path, dict(headers)))
        sent = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        reply = await asyncio.wait_for(call(app, method, path, body, sent), timeout_s)
        return reply.status, reply.body

    def close(self) -> None: ...

"""A node following the table catalog while it runs: versions that come and go, aliases that move.

A node reads the catalog whole when it starts (``kiq.node_build``); from then on this
follower tails it (``kiq.kafka.compacted.Follower``) and applies what changes:

- a table version a pipeline declares (``kiq pipeline run --version v2``) is served as soon
  as its topic exists: the group takes its partitions, the materializer restores them;
- an alias (``kiq switch``) moves the table's name to another version at once, one dict
  assignment that every request after it sees, and nothing else moves;
- a declaration's tombstone (``kiq retire``) closes the version's replicas and deletes
  their stores.

No other coordinator: every node does the same with the same records, in the same order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import msgspec

from kiq.catalog import CATALOG_TOPIC
from kiq.kafka import KafkaSecurity, delete_topics, topic_partitions
from kiq.kafka.compacted import Follower
from kiq.node import Node
from kiq.stores import remove_table_stores
from kiq.tables import TableRuntime, codec_for
from kiq.tables.declared import Declared, Served, serves, spec_for
from kiq.tables.versions import Alias, alias_key

log = logging.getLogger(__name__)

_TABLE = "table:"
_ALIAS = "alias:"
# How long a retired version's replicas may take to close before its stores are deleted.
_CLOSE_WAIT_S = 10.0
# How often a declared version whose topic does not exist yet is looked for again.
_RETRY_S = 1.0


class NodeCatalog:
    """Applies the catalog's changes to ``node`` (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        bootstrap: str,
        app: str,
        served: Sequence[Served],
        every_declared: bool,
        data_dir: Path,
        *,
        security: KafkaSecurity,
        default_standby: int = 1,
    ) -> None:
        self._node = node
        self._bootstrap = bootstrap
        self._app = app
        self._served = list(served)
        self._every = every_declared
        self._data_dir = data_dir
        self._security = security
        self._standby = default_standby
        self._names: dict[str, str] = {}  # catalog key → the version's internal name
        self._pending: dict[str, Declared] = {}  # declared, topic not there yet
        self._retry_at = 0.0
        self._warned: set[str] = set()  # versions whose failure to add was logged
        self.follower = Follower(
            bootstrap,
            CATALOG_TOPIC,
            self.apply,
            security=security,
            idle_s=_RETRY_S,
            name=f"kiq-catalog-{node.node_id}",
        )

    def start(self) -> None:
        self.follower.start()

    def stop(self) -> None:
        self.follower.stop()

    def apply(self, records: list[tuple[str, bytes | None]]) -> None:
        """One batch of catalog records, in the order written (empty: a quiet poll)."""
        for key, value in records:
            if key.startswith(_TABLE):
                self._declared(key, value)
            elif key.startswith(_ALIAS):
                self._aliased(key, value)
        if self._pending and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + _RETRY_S
            for key, declared in list(self._pending.items()):
                if self._add(declared):
                    self._pending.pop(key, None)

    def _declared(self, key: str, value: bytes | None) -> None:
        if value is None:
            self._pending.pop(key, None)
            name = self._names.pop(key, None)
            if name is not None:
                self._retire(name)
            return
        try:
            declared = msgspec.json.decode(value, type=Declared)
        except msgspec.DecodeError:
            return  # a newer kiq's record: the node serves what it understands
        if not serves(self._served, self._every, declared, self._app):
            return
        self._names[key] = declared.name
        if declared.name in self._node.tables:
            return  # served already (a change to it takes a restart, as before)
        if not self._add(declared):
            self._pending[key] = declared

    def _add(self, declared: Declared) -> bool:
        """Serve ``declared``; False while its topic does not exist yet (the pipeline declares
        a table before it creates the topic)."""
        try:
            spec = spec_for(self._served, declared, self._standby)
            count = topic_partitions(self._bootstrap, spec.topic, security=self._security)
        except Exception as exc:  # a clash with [serve] tables, or Kafka: said once, tried again
            if declared.name not in self._warned:
                self._warned.add(declared.name)
                log.warning("table version not served yet table=%s error=%s", declared.name, exc)
            return False
        if count is None:
            return False
        self._node.add_table(TableRuntime(spec, codec_for(spec), count))
        return True

    def _aliased(self, key: str, value: bytes | None) -> None:
        alias = None
        if value is not None:
            try:
                alias = msgspec.json.decode(value, type=Alias)
            except msgspec.DecodeError:
                return
            if alias.app != self._app or alias.catalog_key != key:
                return
            table = alias.table
        else:
            app, _, table = key[len(_ALIAS) :].partition("/")
            if alias_key(table, app) != key or app != self._app:
                return
        self._node.set_alias(table, alias)

    def _retire(self, name: str) -> None:
        closed = self._node.drop_table(name)
        if not closed.wait(_CLOSE_WAIT_S):
            log.warning("table retired but its replicas did not close in time table=%s", name)
            return
        if remove_table_stores(self._data_dir, name):
            log.info("table stores deleted table=%s", name)


class Writes(Protocol):
    async def send(self, topic: str, key: bytes, value: bytes | None) -> tuple[int, int]: ...


class CatalogWriter:
    """What ``kiq switch`` and ``kiq retire`` write through a node (``kiq.api.versions``'s
    ``CatalogAdmin``): catalog records through the node's producer, topics deleted with its
    Kafka credentials, and whether its own follower has seen a record yet."""

    def __init__(
        self,
        app: str,
        writer: Writes,
        follower: NodeCatalog,
        bootstrap: str,
        *,
        security: KafkaSecurity,
    ) -> None:
        self.app = app
        self._writer = writer
        self._follower = follower
        self._bootstrap = bootstrap
        self._security = security

    async def put(self, topic: str, key: str, value: bytes | None) -> int:
        return (await self._writer.send(topic, key.encode(), value))[1]

    async def followed(self, offset: int, timeout_s: float) -> bool:
        return await asyncio.to_thread(self._follower.follower.wait_past, offset, timeout_s)

    async def delete_topics(self, topics: Sequence[str]) -> list[str]:
        return await asyncio.to_thread(self._delete, list(topics))

    def _delete(self, topics: list[str]) -> list[str]:
        there = [t for t in topics if topic_partitions(self._bootstrap, t, security=self._security)]
        if there:
            delete_topics(self._bootstrap, there, security=self._security)
        return there

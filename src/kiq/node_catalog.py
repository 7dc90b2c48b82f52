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

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError
from kiq.kafka import KafkaSecurity, delete_topics, topic_partitions
from kiq.kafka.compacted import Follower, read_latest
from kiq.node import Node
from kiq.stores import remove_table_stores
from kiq.tables import TableRuntime, checks, codec_for
from kiq.tables.declared import Declared, ServeEntry, serves, spec_for
from kiq.tables.retire import RESERVED
from kiq.tables.versions import Alias, alias_key

log = logging.getLogger(__name__)

_TABLE = "table:"
_ALIAS = "alias:"
# How long a retired version's replicas may take to close before its stores are deleted.
_CLOSE_WAIT_S = 10.0
# How often a declared version whose topic does not exist yet is looked for again.
_RETRY_S = 1.0
# At most this many declarations wait for their topic (a flood of them costs no more).
_MAX_PENDING = 1000


class NodeCatalog:
    """Applies the catalog's changes to ``node`` (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        bootstrap: str,
        app: str,
        served: Sequence[ServeEntry],
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

    def apply(
        self, records: Sequence[tuple[str, bytes | None]], offsets: Sequence[int] = ()
    ) -> None:
        """One batch of catalog records, in the order written (empty: a quiet poll), with
        their offsets when known. Each is untrusted (``kiq.tables.checks``): one that is
        refused, or fails, is skipped alone and never stops the others."""
        for i, (key, value) in enumerate(records):
            where = f"partition=0 offset={offsets[i]}" if i < len(offsets) else ""
            try:
                if key.startswith(_TABLE):
                    self._declared(key, value, where)
                elif key.startswith(_ALIAS):
                    self._aliased(key, value, where)
            except Exception as exc:  # the next record is still applied; the log has why
                log.warning(
                    "catalog record not applied topic=%s %s key=%.200r error=%s",
                    CATALOG_TOPIC,
                    where,
                    key,
                    exc,
                )
        if self._pending and time.monotonic() >= self._retry_at:
            self._retry_at = time.monotonic() + _RETRY_S
            for key, declared in list(self._pending.items()):
                if self._add(declared):
                    self._pending.pop(key, None)
                    self._served_by(key, declared)

    def _declared(self, key: str, value: bytes | None, where: str = "") -> None:
        if value is None:
            self._pending.pop(key, None)
            # Only a name this node derived from a valid record and serves: never the key's.
            name = self._names.pop(key, None)
            if name is not None:
                self._retire(name)
            return
        declared = checks.decode(CATALOG_TOPIC, key, value, Declared, where)
        if declared is None:
            return  # refused (logged once), or a newer kiq's: the node serves what it can read
        if not serves(self._served, self._every, declared, self._app):
            return
        if declared.name in self._node.tables:
            self._served_by(key, declared)
            return  # served already (a change to it takes a restart, as before)
        if self._add(declared):
            self._served_by(key, declared)
        elif key in self._pending or len(self._pending) < _MAX_PENDING:
            self._pending[key] = declared
        else:
            checks.refused(
                CATALOG_TOPIC, key, "too many declarations wait for their topic", where=where
            )

    def _served_by(self, key: str, declared: Declared) -> None:
        """Note that the version ``key`` declares is served: its tombstone retires it."""
        if declared.name in self._node.tables and checks.internal_name_ok(declared.name):
            self._names[key] = declared.name

    def _add(self, declared: Declared) -> bool:
        """Serve ``declared``; False while its topic does not exist yet (the pipeline declares
        a table before it creates the topic), or another table is served from it."""
        try:
            spec = spec_for(self._served, declared, self._standby)
            other = next(
                (
                    t.spec.name
                    for t in list(self._node.tables.values())
                    if t.spec.topic == spec.topic and t.spec.name != spec.name
                ),
                None,
            )
            if other is not None:
                raise ConfigError(f"table {other} is served from topic {spec.topic!r}")
            if spec.topic == self._node.settings.dead_letter_topic:
                raise ConfigError(f"topic {spec.topic!r} is the node's dead letters")
            count = topic_partitions(self._bootstrap, spec.topic, security=self._security)
        except Exception as exc:  # a clash with [serve] tables, or Kafka: said once, tried again
            if declared.name not in self._warned and len(self._warned) < _MAX_PENDING:
                self._warned.add(declared.name)
                log.warning("table version not served yet table=%s error=%s", declared.name, exc)
            return False
        if count is None:
            return False
        self._node.add_table(TableRuntime(spec, codec_for(spec), count))
        return True

    def _aliased(self, key: str, value: bytes | None, where: str = "") -> None:
        alias = None
        if value is not None:
            alias = checks.decode(CATALOG_TOPIC, key, value, Alias, where)
            if alias is None or alias.app != self._app:
                return
            table = alias.table
        else:
            app, _, table = key[len(_ALIAS) :].partition("/")
            if not checks.table_name_ok(table) or alias_key(table, app) != key or app != self._app:
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
    """What ``kiq switch`` and ``kiq retire`` write through a node (``kiq.ops.versions``'s
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

    async def latest(self) -> dict[str, bytes]:
        return await asyncio.to_thread(
            read_latest, self._bootstrap, CATALOG_TOPIC, security=self._security
        )

    def _delete(self, topics: list[str]) -> list[str]:
        # The last fence: whatever a caller decided, never the catalog, progress or Kafka's own.
        topics = [t for t in topics if t not in RESERVED and not t.startswith("__")]
        there = [t for t in topics if topic_partitions(self._bootstrap, t, security=self._security)]
        if there:
            delete_topics(self._bootstrap, there, security=self._security)
        return there

"""Where a call goes: the key's partition's active node, then its standbys, then any node.

``Router`` keeps the last ``Topology`` and says when to ask for a new one: before the
first call, after a misroute (an answer served by another node than the one asked, a
503, no answer at all), and once it is ``max_age_s`` old (a node joined or left: a
new ``view_version``). Refreshes are at least ``min_interval_s`` apart, so a cluster
in failover is not asked for its metadata by every failed call. When the cluster
refuses the metadata (it needs kiq:admin on a node with authentication), the router
sends every call to any node and lets the node forward it.

``trusted`` is where the token may go (``origins.py``): the seeds, and the members the
metadata last read names; a new topology replaces the members it vouched for.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence

from kiq.client.keys import TableInfo
from kiq.client.origins import Origin, origin_of, origins
from kiq.client.topology import Topology

log = logging.getLogger(__name__)


class Router:
    def __init__(
        self,
        seeds: Sequence[str],
        max_age_s: float = 30.0,
        min_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        urls = tuple(u.rstrip("/") for u in seeds)
        if not urls:
            raise ValueError("a kiq client needs at least one node's URL")
        self.seeds = urls
        self._trusted = origins(urls)
        self.topology: Topology | None = None
        self.unrouted = False  # the metadata was refused: any node, which forwards
        self.refreshes = 0  # refreshes finished, failed or not: one flight at a time
        self._max_age_s = max_age_s
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._stale = True
        self._asked_at = float("-inf")
        self._fetched_at = float("-inf")
        self._turn = itertools.count()
        # (table, partition) → where its calls go, for the current topology: the hot path
        self._plans: dict[tuple[str, int], list[str]] = {}

    # -- when to refresh --------------------------------------------------------------

    def due(self) -> bool:
        """Whether a call should refresh the metadata before it goes on."""
        now = self._clock()
        if self.topology is None and not self.unrouted:
            return True  # nothing to route by yet: wait for the refresh under way, if any
        if now - self._asked_at < self._min_interval_s:
            return False
        if self.unrouted:
            return now - self._asked_at >= self._max_age_s
        return self._stale or now - self._fetched_at >= self._max_age_s

    def mark_stale(self) -> None:
        self._stale = True

    def asking(self) -> None:
        self._asked_at = self._clock()

    def update(self, topology: Topology) -> None:
        old = self.topology
        if old is not None and old.view_version != topology.view_version:
            log.info("cluster view %d -> %d", old.view_version, topology.view_version)
        self.topology = topology
        self._trusted = origins((*self.seeds, *topology.all_urls()))
        self._plans.clear()
        self.unrouted = False
        self._stale = False
        self._fetched_at = self._clock()
        self.refreshes += 1

    def failed(self, refused: bool) -> None:
        """No node gave the metadata; ``refused``: a node said this caller may not read it."""
        if refused and not self.unrouted:
            log.warning("the cluster refused /v1/metadata (needs kiq:admin): calls go to any node")
        self.unrouted = self.unrouted or refused
        self.refreshes += 1

    # -- whom to trust ----------------------------------------------------------------

    def trusted(self) -> frozenset[Origin]:
        """The origins the token may go to: the seeds', and those of the members named in
        the metadata last read (from a trusted node: ``sources`` are only ever these)."""
        return self._trusted

    def trusts(self, url: str) -> bool:
        return origin_of(url) in self._trusted

    # -- where to send ----------------------------------------------------------------

    def sources(self) -> list[str]:
        """Where to ask for the metadata: the known nodes, then the seeds, by turns."""
        known = self.topology.urls if self.topology is not None else ()
        return self._rotate(list(dict.fromkeys((*known, *self.seeds))))

    def anywhere(self) -> list[str]:
        """Every node, a different one first each call: for calls any node answers."""
        return self.sources()

    def table(self, name: str) -> TableInfo | None:
        return self.topology.tables.get(name) if self.topology is not None else None

    def holders(self, table: str, partition: int) -> list[str]:
        """The partition's replicas best first, then every other node (they forward).
        Not to be changed: the same list answers until the metadata is read again."""
        topology = self.topology
        if topology is None:
            return self.anywhere()
        plan = self._plans.get((table, partition))
        if plan is not None:
            return plan
        held = list(topology.holders(table, partition))
        info = topology.tables.get(table)
        if info is not None and info.global_ and held:
            return self._rotate(held) + [u for u in topology.urls if u not in held]
        plan = held + [u for u in topology.urls if u not in held]
        self._plans[(table, partition)] = plan
        return plan

    def key(self, table: str, key: str) -> tuple[int | None, list[str]]:
        """The key's partition (None: the table is not known) and where to ask for it."""
        info = self.table(table)
        if info is None:
            return None, self.anywhere()
        partition = info.partition_of(key)
        return partition, self.holders(table, partition)

    def node_at(self, url: str) -> str | None:
        return self.topology.node_ids.get(url) if self.topology is not None else None

    def _rotate(self, urls: list[str]) -> list[str]:
        if len(urls) < 2:
            return urls
        i = next(self._turn) % len(urls)
        return urls[i:] + urls[:i]

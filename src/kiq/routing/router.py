"""Ordering the replicas that may answer for a partition.

The active replica first (freshest), then the standbys, then the nodes that
held the partition before the last rebalance (their copies linger, warm), then
a lingering local copy as a last resort. A caller that states ``max_lag``
accepts any replica that close to the log end: this node's own, when within it,
comes first (no hop). A node that failed a moment ago goes to the back of the
line for a short while, so a dead node costs one failed attempt, not one per
request. A node that stalls instead (stopped, paused) fails nothing for a
while: it loses hedged races without answering (``hedging.py``), and after
``SUSPECT_AFTER`` such losses in a row it goes to the back of the line until it
answers anything again (``Peers`` probes it so that it can). Only members of
the cluster view are ever targets.
"""

from __future__ import annotations

import math
import time

from kiq.cluster import ClusterView
from kiq.peers.wire import LOCAL as LOCAL  # the routing's name for this node, too
from kiq.replicas.replica import ReadOnlyReplica

SUSPECT_AFTER = 3  # races lost in a row without an answer before a node is avoided
_UNTIL_IT_ANSWERS = math.inf


_Order = tuple[tuple[str, ...], float]  # targets, and until when they stand
_OrderKey = tuple[str, int, bool, bool]  # table, partition, local usable, max_lag given


class Router:
    """``home``: where this node's own replicas are read when the local ones cannot answer
    (a read worker's node, ``kiq.workers``); None: this process is the node.

    Every forwarded lookup asks for its partition's order, which changes only with the
    cluster view, a node's penalty, or a penalty running out: orders are kept until then.
    """

    def __init__(self, node_id: str, penalty_s: float = 1.0, home: str | None = None) -> None:
        self.node_id = node_id
        self.home = home
        self._penalty_s = penalty_s
        self._down_until: dict[str, float] = {}
        self._unanswered: dict[str, int] = {}
        self._orders: dict[_OrderKey, _Order] = {}
        self._orders_of: ClusterView | None = None  # the view they were worked out from

    def targets(
        self,
        view: ClusterView,
        table: str,
        partition: int,
        local: ReadOnlyReplica | None,
        max_lag: int | None = None,
    ) -> list[str]:
        """``LOCAL`` or member URLs, best first; the caller's own list."""
        local_ok = local is not None and servable(local, max_lag)
        if view is not self._orders_of:
            self._orders.clear()
            self._orders_of = view
        key = (table, partition, local_ok, max_lag is not None)
        now = time.monotonic()
        kept = self._orders.get(key)
        if kept is not None and now < kept[1]:
            return list(kept[0])
        order = self._order(view, table, partition, local_ok, max_lag, now)
        # It stands until the first penalty among its targets runs out.
        down = self._down_until
        until = min((d for t in order if (d := down.get(t, 0.0)) > now), default=math.inf)
        self._orders[key] = (tuple(order), until)
        return order

    def _order(
        self,
        view: ClusterView,
        table: str,
        partition: int,
        local_ok: bool,
        max_lag: int | None,
        now: float,
    ) -> list[str]:
        order: list[str] = []
        later: list[str] = []
        for node_id in view.of(table, partition).candidates:
            if node_id == self.node_id:
                if local_ok:
                    order.append(LOCAL)
                elif self.home is not None:
                    order.append(self.home)
                continue
            url = view.url(node_id)
            if url is None:
                continue
            (later if self._down_until.get(url, 0.0) > now else order).append(url)
        order.extend(later)
        if local_ok:
            if max_lag is not None:  # as fresh as the caller asked, and no hop away
                order = [LOCAL, *(target for target in order if target != LOCAL)]
            elif LOCAL not in order:
                order.append(LOCAL)
        return order

    def failed(self, url: str) -> None:
        if self._down_until.get(url) != _UNTIL_IT_ANSWERS:
            self._down_until[url] = time.monotonic() + self._penalty_s
            self._orders.clear()

    def succeeded(self, url: str) -> None:
        if self._down_until.pop(url, None) is not None:
            self._orders.clear()
        if self._unanswered:
            self._unanswered.pop(url, None)

    def unanswered(self, url: str) -> bool:
        """``url`` lost a hedged race without answering; True when it is now avoided."""
        count = self._unanswered.get(url, 0) + 1
        if count < SUSPECT_AFTER or self.suspect(url):
            self._unanswered[url] = count
            return False
        self._unanswered.pop(url, None)
        self._down_until[url] = _UNTIL_IT_ANSWERS
        self._orders.clear()
        return True

    def suspect(self, url: str) -> bool:
        """Avoided until it answers."""
        return self._down_until.get(url) == _UNTIL_IT_ANSWERS


def servable(replica: ReadOnlyReplica, max_lag: int | None) -> bool:
    """Whether ``replica`` may answer a read: serving, and within ``max_lag`` when given."""
    if not replica.state.serving:
        return False
    return max_lag is None or 0 <= replica.lag <= max_lag

"""Where the proxy sends a request: the owner of the key it names, else any node.

The table routes that name a key (a lookup, a key's windows, a watch of one key) go to
the key's partition's replicas, best first; a scan or top under a prefix that names
one partition, and a watch of keys that share one, go to that partition's; everything
else (the cluster routes, scans of every partition, reads by an index, which every
partition answers a part of, an application's own routes) to any node, by turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from kiq.client.calls import Plan, prefix_plan
from kiq.client.router import Router

_TABLES = "/v1/tables/"


@dataclass(frozen=True)
class Destination:
    """A request's ``plan`` (the nodes to try, best first), whether it streams (a watch),
    the table of a multiget, which the proxy splits by owner, and whether it reads one
    key (its answer is one value or one key's windows: small enough for the pool's cap)."""

    plan: Plan
    stream: bool = False
    multiget_table: str | None = None
    one_key: bool = False


def destination(
    router: Router, method: str, raw_path: str, query: Mapping[str, str]
) -> Destination:
    """Where ``method raw_path?query`` goes (``raw_path`` as sent: segments still quoted)."""
    if not raw_path.startswith(_TABLES):
        return Destination(router.anywhere)
    parts = raw_path[len(_TABLES) :].split("/")
    table = unquote(parts[0])
    if len(parts) >= 3 and parts[1] == "keys" and method == "GET":
        key = unquote(parts[2])
        stream = parts[3:] == ["watch"]
        return Destination(lambda: router.key(table, key)[1], stream=stream, one_key=not stream)
    rest = parts[1:]
    if rest == ["multiget"] and method == "POST":
        return Destination(router.anywhere, multiget_table=table)
    if rest in (["range"], ["top"]):
        return Destination(prefix_plan(router, table, query.get("prefix")))
    if rest[:1] == ["by"]:  # .../by/{field}[/{value}]: the node asks every partition
        return Destination(router.anywhere)
    if rest == ["watch"]:
        keys = [k for k in query.get("keys", "").split(",") if k]
        if keys:
            return Destination(lambda: _shared(router, table, keys), stream=True)
        return Destination(prefix_plan(router, table, query.get("prefix")), stream=True)
    return Destination(router.anywhere)


def _shared(router: Router, table: str, keys: list[str]) -> list[str]:
    """The replicas of the one partition ``keys`` share; any node when they do not."""
    info = router.table(table)
    partitions = {info.partition_of(k) for k in keys} if info is not None else set()
    if len(partitions) == 1:
        return router.holders(table, partitions.pop())
    return router.anywhere()

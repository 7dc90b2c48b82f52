"""A plain lookup's first attempt, made without a flow: the hot path of ``get``.

A flow (``steps.py``) costs generators, closures and a ``Send`` per call, and a lookup
needs none of them for its first attempt when it asks no ``max_lag``, ``min_offset`` or
``wait_ms`` of a table the metadata names and no refresh is due: its URL is its
partition's first holder's (the route ``Router.holders`` keeps per partition). A
success is finished here as ``calls.read`` and ``calls.ok`` would finish it (the
answer's position merged, a forward marking the metadata stale); any other outcome (no
answer, an error status, a redirect) goes to the lookup's flow as its attempt 0
(``calls.read``'s ``first``), so retries, failover, refreshes and errors stay written
once. Measured: ``kiq bench client`` (docs/benchmarks.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

import httpx

from kiq.client.calls import SERVED_BY, TABLES, headers_of, segment
from kiq.client.position import SessionPosition
from kiq.client.router import Router

# What ``segment`` (``quote(text, safe="")``) leaves as it is: most keys.
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")


class Aim:
    """Where a first attempt goes: the node's URL (``node``), the request's, its headers."""

    __slots__ = ("headers", "node", "url")

    def __init__(self, node: str, url: str, headers: Mapping[str, str] | None) -> None:
        self.node, self.url, self.headers = node, url, headers


def aim(router: Router, position: SessionPosition | None, table: str, key: str) -> Aim | None:
    """The first attempt of a plain lookup of ``key``; None: the flow decides from the
    start (a refresh due, no metadata yet or refused, a table it does not name)."""
    if router.due():
        return None
    info = router.table(table)
    if info is None:
        return None
    holders = router.holders(table, info.partition_of(key))
    if not holders:
        return None
    node = holders[0]
    plain = _PLAIN.fullmatch(key) is not None and key != "." and key != ".."
    url = f"{node}{_keys_path(table)}{key if plain else segment(key)}"
    return Aim(node, url, position.asking(None) if position is not None else None)


def finished(
    router: Router, node: str, response: httpx.Response, position: SessionPosition | None
) -> bool:
    """Whether ``response`` ends the lookup (a success); if so, its position is merged
    and a forward (served by another node than ``node``) marks the metadata stale."""
    if response.status_code >= 300:
        return False
    headers = headers_of(response)
    if position is not None:
        position.seen(headers)
    served_by = headers.get(SERVED_BY)
    if served_by is not None:
        asked = router.node_at(node)
        if asked is not None and served_by != asked:
            router.mark_stale()  # the node forwarded: the partition has moved
    return True


@lru_cache(maxsize=1024)
def _keys_path(table: str) -> str:
    return f"{TABLES}/{segment(table)}/keys/"

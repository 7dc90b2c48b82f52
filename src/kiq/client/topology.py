"""The cluster as one node described it: who holds each partition, and at which URL.

Built from ``GET /v1/metadata`` (every partition's active and standbys with their
URLs, the view's version) and ``GET /v1/tables`` (each table's partition count and
key separator). Pure data: ``Router`` keeps the current one and decides when to ask
for a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiq.client.keys import TableInfo


@dataclass(frozen=True)
class Topology:
    """``replicas[(table, partition)]``: URLs best first (active, then standbys);
    ``node_ids[url]``: the node at a URL, to tell whether it answered itself."""

    view_version: int
    urls: tuple[str, ...]
    node_ids: Mapping[str, str]
    tables: Mapping[str, TableInfo]
    replicas: Mapping[tuple[str, int], tuple[str, ...]]

    @classmethod
    def of(cls, metadata: Mapping[str, Any], tables: Mapping[str, Any]) -> Topology:
        """From the bodies of ``GET /v1/metadata`` and ``GET /v1/tables``."""
        nodes = {str(n["url"]).rstrip("/"): str(n["id"]) for n in metadata.get("nodes", [])}
        infos = {t["name"]: TableInfo.of(t) for t in tables.get("tables", [])}
        replicas: dict[tuple[str, int], tuple[str, ...]] = {}
        for name, table in metadata.get("tables", {}).items():
            for part in table.get("partitions", []):
                urls: Mapping[str, str | None] = part.get("urls", {})
                order = [part.get("active"), *part.get("standbys", [])]
                found = (urls.get(n) for n in order if n is not None)
                replicas[(name, int(part["partition"]))] = tuple(u.rstrip("/") for u in found if u)
        return cls(
            view_version=int(metadata.get("view_version", 0)),
            urls=tuple(nodes),
            node_ids=nodes,
            tables=infos,
            replicas=replicas,
        )

    def all_urls(self) -> tuple[str, ...]:
        """Every URL the metadata named: its members', and its partitions' replicas'."""
        held = (u for urls in self.replicas.values() for u in urls)
        return tuple(dict.fromkeys((*self.urls, *held)))

    def holders(self, table: str, partition: int) -> tuple[str, ...]:
        """The URLs that hold ``partition``, best first; empty when none is known."""
        return self.replicas.get((table, partition), ())

"""Who a group member is: its node id and advertised HTTP endpoint, carried in client.id.

Kafka's group description shows each member's client.id, so encoding the node
id and URL there lets every node learn every endpoint from Kafka itself. Anyone
who may join the group can claim any client.id, though: ``admitted`` drops the
claims that cannot be told apart from an impostor's (an id claimed twice, this
node's own id, a plain-http URL in a cluster that speaks TLS), and ``Peers``
(peers/sender.py) sends nothing to a member before it proves it holds the
cluster secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kiq.errors import ConfigError

_PREFIX = "kiq"
_SEP = "|"
NODE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, order=True)
class Member:
    node_id: str
    url: str


def encode_client_id(node_id: str, url: str) -> str:
    if not NODE_ID.fullmatch(node_id):
        raise ConfigError(f"node id {node_id!r} must match {NODE_ID.pattern}: fix --node-id")
    if not url.startswith(("http://", "https://")) or _SEP in url:
        raise ConfigError(f"advertised URL {url!r} must be http(s)://host:port: fix --advertise")
    return f"{_PREFIX}{_SEP}{node_id}{_SEP}{url.rstrip('/')}"


def decode_client_id(client_id: str) -> Member | None:
    """The member a client.id names, or None for a client that is not a kiq node."""
    parts = client_id.split(_SEP)
    if len(parts) != 3 or parts[0] != _PREFIX or not NODE_ID.fullmatch(parts[1]):
        return None
    if not parts[2].startswith(("http://", "https://")):  # never a local socket (unix:...)
        return None
    return Member(node_id=parts[1], url=parts[2])


def admitted(me: Member, claimed: Iterable[Member]) -> tuple[list[Member], list[str]]:
    """The members to route to, this node first, and why each other claim was refused."""
    urls: dict[str, set[str]] = {}
    for member in claimed:
        urls.setdefault(member.node_id, set()).add(member.url)
    kept = [me]
    refused: list[str] = []
    tls = me.url.startswith("https://")
    for node_id in sorted(urls):
        found = sorted(urls[node_id])
        if node_id == me.node_id:
            others = [url for url in found if url != me.url]
            if others:
                refused.append(
                    f"node id {node_id} (this node's) also claimed at {', '.join(others)}"
                )
        elif len(found) > 1:
            refused.append(f"node id {node_id} claimed by several members: {', '.join(found)}")
        elif tls and not found[0].startswith("https://"):
            refused.append(f"node {node_id} at {found[0]}: plain http in a cluster that uses TLS")
        else:
            kept.append(Member(node_id, found[0]))
    return kept, refused

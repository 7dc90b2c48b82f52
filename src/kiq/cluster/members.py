"""Who a group member is: its node id and advertised HTTP endpoint, carried in client.id.

Kafka's group description shows each member's client.id, so encoding the node
id and URL there lets every node learn every endpoint from Kafka itself.
"""

from __future__ import annotations

import re
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
    return Member(node_id=parts[1], url=parts[2])

"""Both ends of the node-to-node protocol: what travels (``wire.py``), the client that
forwards a request to another node, down one line of stages each built with the next
(``client.py`` → ``hedging.py`` → ``batcher.py`` → ``sender.py``, which sends over the
lookup channel ``channel.py`` or the pool ``pool.py``), and the receiving end of that
channel (``channel_server.py``). Which replica to ask is ``kiq.routing``'s question."""

from kiq.peers.client import Peers
from kiq.peers.errors import PeerError
from kiq.peers.hedging import HedgePolicy
from kiq.peers.wire import (
    FORWARDED,
    LOCAL,
    Item,
    LookupResult,
    MultigetResult,
    NodeStatus,
    Outcome,
    ScanResult,
    Source,
)

__all__ = [
    "FORWARDED",
    "LOCAL",
    "HedgePolicy",
    "Item",
    "LookupResult",
    "MultigetResult",
    "NodeStatus",
    "Outcome",
    "PeerError",
    "Peers",
    "ScanResult",
    "Source",
]

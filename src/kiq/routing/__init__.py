"""Which replica answers a request, and getting the answer from another node."""

from kiq.routing.errors import PeerError
from kiq.routing.hedging import HedgePolicy
from kiq.routing.peers import Peers
from kiq.routing.reader import ReplicaReader
from kiq.routing.router import LOCAL, Router, servable
from kiq.routing.wire import (
    FORWARDED,
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
    "ReplicaReader",
    "Router",
    "ScanResult",
    "Source",
    "servable",
]

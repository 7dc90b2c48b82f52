"""Which replica answers a request, and getting the answer from another node."""

from kiq.routing.errors import PeerError
from kiq.routing.hedging import HedgePolicy
from kiq.routing.peers import Peers
from kiq.routing.router import LOCAL, Router, servable
from kiq.routing.wire import FAILED, FORWARDED, Item, LookupResult, MultigetResult, NodeStatus

__all__ = [
    "FAILED",
    "FORWARDED",
    "LOCAL",
    "HedgePolicy",
    "Item",
    "LookupResult",
    "MultigetResult",
    "NodeStatus",
    "PeerError",
    "Peers",
    "Router",
    "servable",
]

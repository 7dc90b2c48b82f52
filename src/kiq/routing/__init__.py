"""Which replica answers a request: the order of a partition's replicas (``router.py``),
this node's own (``local.py``), and trying them in turn (``reader.py``); asking another
node is ``kiq.peers``."""

from kiq.routing.reader import ReplicaReader
from kiq.routing.router import LOCAL, Router, servable

__all__ = ["LOCAL", "ReplicaReader", "Router", "servable"]

"""Which replica answers a request, and getting the answer from another node."""

from kiq.routing.batcher import LookupBatcher
from kiq.routing.forwarder import Forwarder, Reply
from kiq.routing.router import LOCAL, Router
from kiq.routing.wire import Lookup, LookupResult

__all__ = ["LOCAL", "Forwarder", "Lookup", "LookupBatcher", "LookupResult", "Reply", "Router"]

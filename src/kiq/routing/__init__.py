"""Which replica answers a request, and getting the answer from another node."""

from kiq.routing.forwarder import Forwarder, Reply
from kiq.routing.router import LOCAL, Router

__all__ = ["LOCAL", "Forwarder", "Reply", "Router"]

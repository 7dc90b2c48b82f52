"""Live updates: a key's changes pushed to its watchers as its replica applies them.

``Watches`` (watches.py) is a node's hub: one ``Feed`` per watched partition (feeds.py),
fed by this node's replica or relayed from the best one elsewhere, shared by the
``Subscription``s (subscription.py) of every subscriber; events.py says what they are told.
The HTTP side (Server-Sent Events) is the API's: api/watch.py and api/sse.py.
"""

from kiq.live.events import Cursor, Event, Kind
from kiq.live.subscription import Subscription
from kiq.live.watches import Watches

__all__ = ["Cursor", "Event", "Kind", "Subscription", "Watches"]

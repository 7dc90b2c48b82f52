"""Tick feeds into Kafka: a simulated stock market, or a file replayed.

The ``stock-ticks`` contract is in :mod:`kiq.feeds.ticks`; the simulator is
pure logic, :class:`TickProducer` the one piece that talks to Kafka, and
:func:`pace` hands ticks from either source to it at a steady rate.
"""

from kiq.feeds.errors import FeedError, InvalidTick, ReplayError
from kiq.feeds.pacing import RunStats, StopReason, pace
from kiq.feeds.producer import DeliveryHook, TickProducer
from kiq.feeds.replay import BadLine, TickFile
from kiq.feeds.simulator import TickSimulator
from kiq.feeds.symbols import SYMBOLS, Listing
from kiq.feeds.ticks import FIELDS, Tick, validate

# The feeds' settings are the [feed] section of the one settings tree.
from kiq.settings import FeedSettings

__all__ = [
    "FIELDS",
    "SYMBOLS",
    "BadLine",
    "DeliveryHook",
    "FeedError",
    "FeedSettings",
    "InvalidTick",
    "Listing",
    "ReplayError",
    "RunStats",
    "StopReason",
    "Tick",
    "TickFile",
    "TickProducer",
    "TickSimulator",
    "pace",
    "validate",
]

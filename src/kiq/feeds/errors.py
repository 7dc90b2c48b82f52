"""Errors of the feeds. All derive from ``kiq.errors.KiqError``::

    KiqError
    └── FeedError        a feed cannot run as asked: the message names what to fix
        ├── InvalidTick  a tick breaks the contract (kiq.feeds.ticks): skip it or fix its source
        └── ReplayError  a replay file cannot be read, or --strict met a bad line

A broker that does not answer is ``kiq.errors.BrokerError``, as everywhere else.
"""

from __future__ import annotations

from kiq.errors import KiqError


class FeedError(KiqError):
    """A feed cannot run as asked."""


class InvalidTick(FeedError):
    """A tick does not follow the ``stock-ticks`` contract; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ReplayError(FeedError):
    """A replay file cannot be read, or (with ``--strict``) holds a bad line."""

"""kiq's client: reads a cluster's tables from another process, straight from the node
that holds each key.

    from kiq.client import Client

    with Client(["http://node1:8080", "http://node2:8080"]) as kiq:
        quote = kiq.get("quotes", "AAPL")

It computes each key's partition as the nodes do (``keys.py``), sends the call to the
partition's active node from the cluster's metadata (``router.py``), falls back to the
standbys and retries with backoff (``calls.py``), and raises ``ClientError``s
(``errors.py``). ``AsyncClient`` is the same for asyncio. docs/api.md describes it.
"""

from __future__ import annotations

from kiq.client.aio import AsyncClient
from kiq.client.errors import (
    AuthError,
    BadRequest,
    ClientError,
    Forbidden,
    KeyNotFound,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    UnknownTable,
)
from kiq.client.results import Change, Item, Lookup, Many, Page, Window
from kiq.client.retry import RetryPolicy
from kiq.client.sync import Client

__all__ = [
    "AsyncClient",
    "AuthError",
    "BadRequest",
    "Change",
    "Client",
    "ClientError",
    "Forbidden",
    "Item",
    "KeyNotFound",
    "Lookup",
    "Many",
    "NotFound",
    "Page",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "UnknownTable",
    "Window",
]

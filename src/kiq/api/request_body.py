"""Reading a request body with a bound, apart from ``asgi`` so its error needs no circle.

``asgi`` is the bottom of the API (``errors`` answers through it); refusing an oversized
body raises ``TooLarge`` from ``errors``, so the reader sits above both.
"""

from __future__ import annotations

from kiq.api.asgi import Receive
from kiq.api.errors import TooLarge


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (``[limits] max_body_bytes``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body larger than {limit} bytes", limit=limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)

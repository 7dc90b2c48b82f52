"""Which scan pages wait for the node's ScanGate (api/paced.py): all but small bounded ones."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kiq.api.paced import TOP, WINDOWS, Paced, bounded
from kiq.routing.turns import ScanGate, Turns


def _scope(query: str) -> dict[str, Any]:
    return {"type": "http", "query_string": query.encode()}


def test_a_small_plain_top_and_a_small_window_page_are_bounded() -> None:
    top, windows = bounded(TOP), bounded(WINDOWS)
    assert top is not None and windows is not None
    for query in ("", "n=10", "n=100", "by=bid&n=5"):
        assert top(_scope(query)), query
    # Larger, unreadable, or reading the order on past keys it skips: the gate.
    for query in ("n=101", "n=1000", "n=x", "n=-1", "n=10&prefix=A", "window=2026-11-25T10:00"):
        assert not top(_scope(query)), query
    for query in ("", "limit=100", "limit=1&from=2026-11-25"):
        assert windows(_scope(query)), query
    for query in ("limit=101", "limit=1000", "limit=", "limit=ten"):
        assert windows(_scope(query)) == (query == "limit="), query  # empty: the default
    # Every other route's pages wait, an application's too.
    assert bounded("/v1/tables/{table}/range") is None
    assert bounded("/v1/tables/{table}/by/{field}/{value}") is None
    assert bounded("/apps/stocks/top") is None


def test_a_small_page_passes_a_gate_another_page_holds() -> None:
    ran: list[str] = []
    spent = Turns(budget_s=0.0)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        ran.append(scope["query_string"].decode())
        if scope["query_string"] == b"n=10":  # a small page takes no turns
            turn = spent()
            with pytest.raises(StopIteration):
                turn.send(None)  # done at once: it did not wait

    async def main() -> None:
        await spent()  # the loop's turn taken: the next slice paced would wait for one
        gate = ScanGate(lambda: 0)
        paced = Paced(app, gate, bounded(TOP))
        async with gate.page():  # a page under way
            small = asyncio.ensure_future(paced(_scope("n=10"), None, None))
            large = asyncio.ensure_future(paced(_scope("n=500"), None, None))
            await asyncio.sleep(0.01)
            assert ran == ["n=10"]  # the large one waits for the gate
        await asyncio.wait_for(asyncio.gather(small, large), 1)
        assert ran == ["n=10", "n=500"]
        # Without a predicate (a route whose pages all wait), a small page waits too.
        gated = Paced(app, gate)
        async with gate.page():
            waiting = asyncio.ensure_future(gated(_scope("n=10"), None, None))
            await asyncio.sleep(0.01)
            assert ran == ["n=10", "n=500"]
        await asyncio.wait_for(waiting, 1)

    asyncio.run(main())

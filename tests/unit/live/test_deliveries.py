"""Taps' batches reach the loop together, in order, at most once per interval."""

from __future__ import annotations

import asyncio
import threading

from kiq.live.deliveries import Deliveries
from kiq.stores.base import Change

Seen = list[tuple[str, int, list[Change]]]


def _recorder(name: str, seen: Seen, rounds: list[float]):
    def applied(through: int, changes: list[Change], expired: frozenset[int]) -> None:
        seen.append((name, through, changes))
        rounds.append(asyncio.get_running_loop().time())

    return applied


def test_the_first_batch_goes_at_once_and_the_next_wait_for_the_interval_together():
    seen: Seen = []
    rounds: list[float] = []

    async def main() -> None:
        deliveries = Deliveries(asyncio.get_running_loop(), interval_s=0.2)
        tap_a = deliveries.tap(_recorder("a", seen, rounds))
        tap_b = deliveries.tap(_recorder("b", seen, rounds))
        await asyncio.to_thread(tap_a, 1, [(b"k", b"1", 1)], frozenset())
        await asyncio.sleep(0.05)
        assert [s[:2] for s in seen] == [("a", 1)]  # alone after a quiet interval: at once

        def burst() -> None:  # from a materializer thread, while the interval runs
            tap_b(5, [(b"x", None, 5)], frozenset({5}))
            tap_a(2, [(b"k", b"2", 2)], frozenset())

        thread = threading.Thread(target=burst)
        thread.start()
        thread.join()
        await asyncio.sleep(0.05)
        assert len(seen) == 1  # held until the interval ends
        await asyncio.sleep(0.3)

    asyncio.run(main())
    assert [s[:2] for s in seen] == [("a", 1), ("b", 5), ("a", 2)]  # in the order they came
    assert rounds[2] - rounds[1] < 0.01  # delivered in one round
    assert rounds[1] - rounds[0] >= 0.19  # not before the interval since the first ended


def test_a_failing_feed_does_not_stop_the_others():
    seen: Seen = []
    rounds: list[float] = []

    def broken(through: int, changes: list[Change], expired: frozenset[int]) -> None:
        raise RuntimeError("a feed's bug")

    async def main() -> None:
        deliveries = Deliveries(asyncio.get_running_loop(), interval_s=0.01)
        tap_broken, tap_ok = deliveries.tap(broken), deliveries.tap(_recorder("ok", seen, rounds))
        tap_broken(1, [], frozenset())
        tap_ok(2, [], frozenset())
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert [s[:2] for s in seen] == [("ok", 2)]

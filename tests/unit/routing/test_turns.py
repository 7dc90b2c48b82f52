"""Turns for scan work (routing/turns.py) and a range's merge of partition pages."""

from __future__ import annotations

import asyncio
import random
import time
import zlib

from kiq.api.batches import merge_pages, per_partition
from kiq.routing.turns import ScanGate, Turns, unpaced


def test_a_slice_waits_for_a_later_iteration_once_the_budget_is_spent() -> None:
    order: list[str] = []

    async def scan(name: str, slices: int, turns: Turns) -> None:
        for i in range(slices):
            await turns()
            order.append(f"{name}{i}")

    async def lookups() -> None:
        for i in range(6):
            order.append(f"L{i}")
            await asyncio.sleep(0)  # one per loop iteration, as requests off the sockets

    async def main() -> None:
        turns = Turns(budget_s=0.0)  # every slice after the first waits a turn
        await asyncio.gather(scan("a", 3, turns), scan("b", 3, turns), lookups())
        assert turns.waiting == 0

    asyncio.run(main())
    # First come, first served (a's second slice asked before b's first), and while the
    # lookups run, never two slices without the loop going round between them.
    assert [step for step in order if not step.startswith("L")] == [
        "a0",
        "a1",
        "b0",
        "a2",
        "b1",
        "b2",
    ]
    while_lookups = order[: order.index("L5") + 1]
    runs = "".join("L" if step.startswith("L") else "s" for step in while_lookups)
    assert "ss" not in runs


def test_within_the_budget_slices_run_at_once() -> None:
    async def main() -> int:
        turns = Turns(budget_s=10.0)
        for _ in range(100):
            await turns()
        return turns.waiting

    assert asyncio.run(main()) == 0


def test_a_cancelled_waiter_leaves_the_line() -> None:
    async def main() -> list[str]:
        turns = Turns(budget_s=0.0)
        done: list[str] = []

        async def slice_(name: str) -> None:
            await turns()
            done.append(name)

        tasks = [asyncio.create_task(slice_(name)) for name in "wxy"]
        await asyncio.sleep(0)  # w ran its slice; x and y wait for later iterations
        assert turns.waiting == 2
        tasks[1].cancel()
        await asyncio.wait_for(tasks[2], 1)
        assert turns.waiting == 0
        return done

    assert asyncio.run(main()) == ["w", "y"]


def _pages(keys: list[bytes], partitions: int, share: int, reverse: bool) -> list[list[tuple]]:
    """What each partition answers: its keys in order, up to ``share``."""
    by_partition: list[list[bytes]] = [[] for _ in range(partitions)]
    for key in keys:
        by_partition[zlib.crc32(key) % partitions].append(key)
    return [[(k, b"v") for k in sorted(own, reverse=reverse)[:share]] for own in by_partition]


def test_paging_through_merged_partition_pages_returns_every_key_once() -> None:
    rng = random.Random(7)
    keys = sorted({f"k{rng.randrange(10**6):07d}".encode() for _ in range(5000)})
    cases = [(12, 1000, False), (12, 100, True), (3, 7, False), (1, 100, False), (1, 30, True)]
    for partitions, limit, reverse in cases:
        share = per_partition(limit, partitions)
        assert share <= limit
        seen: list[bytes] = []
        cursor: bytes | None = None
        pages = 0
        while True:
            if reverse:
                left = [k for k in keys if cursor is None or k < cursor]
            else:
                left = [k for k in keys if cursor is None or k > cursor]
            answered = _pages(left, partitions, share, reverse)
            open_ = [len(page) >= share for page in answered]
            rows, more = merge_pages(answered, open_, limit, reverse)
            assert 0 < len(rows) <= limit or not more
            seen.extend(k for k, _ in rows)
            pages += 1
            if not more:
                break
            cursor = rows[-1][0]
        assert seen == sorted(keys, reverse=reverse)
        assert pages <= len(keys) // limit * 2 + 2  # short pages are rare for spread keys


def test_a_range_in_one_partition_comes_in_shorter_pages_not_wrong_ones() -> None:
    keys = [f"k{i:04d}".encode() for i in range(300)]
    share = per_partition(100, 12)
    pages = [[(k, b"v") for k in keys[:share]]] + [[] for _ in range(11)]
    rows, more = merge_pages(pages, [len(page) >= share for page in pages], 100, False)
    assert [k for k, _ in rows] == keys[:share] and more


def test_a_page_that_saw_lookups_keeps_the_next_waiting_by_its_share() -> None:
    served = [0]

    async def main() -> list[float]:
        gate = ScanGate(lambda: served[0], share=0.5)
        took: list[float] = []

        async def page(lookups: int) -> None:
            async with gate.page():
                started = time.monotonic()
                await asyncio.sleep(0.05)  # a page's work
                served[0] += lookups  # lookups answered meanwhile
                took.append(time.monotonic() - started)

        started = time.monotonic()
        await page(3)  # lookups were answered: the next page waits as long again
        await page(0)
        first_two = time.monotonic() - started
        started = time.monotonic()
        await page(0)  # none while the last ran: no wait
        await page(0)
        idle_two = time.monotonic() - started
        return [first_two, idle_two]

    busy, idle = asyncio.run(main())
    assert busy >= 0.145  # 0.05 + 0.05 of rest + 0.05
    assert idle < 0.14


def test_pages_go_one_at_a_time_first_come_first_served() -> None:
    async def main() -> list[str]:
        gate = ScanGate(lambda: 0)
        order: list[str] = []

        async def page(name: str) -> None:
            async with gate.page():
                order.append(f"{name}+")
                await asyncio.sleep(0.01)
                order.append(f"{name}-")

        await asyncio.gather(page("a"), page("b"), page("c"))
        return order

    assert asyncio.run(main()) == ["a+", "a-", "b+", "b-", "c+", "c-"]


def test_an_unpaced_page_takes_no_turns() -> None:
    order: list[str] = []

    async def scan(name: str, turns: Turns) -> None:
        for i in range(3):
            await turns()
            order.append(f"{name}{i}")

    async def small(turns: Turns) -> None:
        with unpaced():
            await scan("s", turns)
        await turns()  # out of it, turns again
        order.append("after")

    async def main() -> None:
        turns = Turns(budget_s=0.0)
        await asyncio.gather(scan("a", turns), small(turns))

    asyncio.run(main())
    # The small page's slices ran back to back, ahead of a's that waited their turns.
    assert order[:4] == ["a0", "s0", "s1", "s2"]
    assert order.index("after") > order.index("a1")

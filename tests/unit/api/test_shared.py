"""Reads that share an answer (``api.shared``): identical reads under way at once run once;
a read that has answered is not kept; one caller gone does not cancel the others' read."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kiq.api.shared import Shared


def test_identical_reads_at_once_run_once_and_all_get_the_answer():
    async def go() -> tuple[list[str], int, int]:
        shared: Shared[str] = Shared()
        started = 0
        gate = asyncio.Event()

        async def read() -> str:
            nonlocal started
            started += 1
            await gate.wait()
            return f"answer {started}"

        waiting = [asyncio.create_task(shared.read(("top", 10), read)) for _ in range(5)]
        await asyncio.sleep(0)
        gate.set()
        return list(await asyncio.gather(*waiting)), started, shared.joined

    answers, started, joined = asyncio.run(go())
    assert answers == ["answer 1"] * 5
    assert (started, joined) == (1, 4)


def test_reads_that_differ_run_each_and_an_answered_read_is_not_kept():
    async def go() -> list[str]:
        shared: Shared[str] = Shared()
        calls: list[object] = []

        def reading(key: object) -> object:
            async def read() -> str:
                calls.append(key)
                await asyncio.sleep(0)
                return f"{key} #{len(calls)}"

            return read

        both = await asyncio.gather(
            shared.read("a", reading("a")),  # type: ignore[arg-type]
            shared.read("b", reading("b")),  # type: ignore[arg-type]
        )
        later = await shared.read("a", reading("a"))  # type: ignore[arg-type]
        return [*both, later]

    assert asyncio.run(go()) == ["a #2", "b #2", "a #3"]


def test_one_caller_cancelled_does_not_cancel_the_read_the_others_wait_for():
    async def go() -> str:
        shared: Shared[str] = Shared()
        gate = asyncio.Event()

        async def read() -> str:
            await gate.wait()
            return "answer"

        first = asyncio.create_task(shared.read("k", read))
        second = asyncio.create_task(shared.read("k", read))
        await asyncio.sleep(0)
        first.cancel()  # the client that started it went away
        await asyncio.sleep(0)
        gate.set()
        assert first.cancelled() or isinstance(first.exception(), asyncio.CancelledError)
        return await second

    assert asyncio.run(go()) == "answer"


def test_a_failed_read_fails_every_caller_and_the_next_read_runs_anew():
    async def go() -> tuple[int, str]:
        shared: Shared[str] = Shared()
        tries = 0

        async def read() -> str:
            nonlocal tries
            tries += 1
            await asyncio.sleep(0)
            if tries == 1:
                raise LookupError("no replica answered")
            return "answer"

        results = await asyncio.gather(
            shared.read("k", read), shared.read("k", read), return_exceptions=True
        )
        assert all(isinstance(r, LookupError) for r in results)
        again = await shared.read("k", read)
        return tries, again

    assert asyncio.run(go()) == (2, "answer")


@pytest.mark.filterwarnings("error")
def test_a_failure_nobody_waits_for_any_more_is_not_reported_as_unretrieved():
    async def go() -> None:
        shared: Shared[str] = Shared()

        async def read() -> str:
            await asyncio.sleep(0.01)
            raise LookupError("no replica answered")

        caller = asyncio.create_task(shared.read("k", read))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.sleep(0.05)  # the read failed with nobody waiting

    errors: list[object] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    loop.run_until_complete(go())
    gc.collect()  # a task's unretrieved failure is reported when it is collected
    loop.close()
    assert errors == []

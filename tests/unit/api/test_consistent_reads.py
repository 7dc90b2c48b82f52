"""Reads across partitions as of one batch (``?consistent=batch``) and at a position
(``X-Kiq-After``), over two nodes in one process (the harness of ``test_batches``)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import orjson
import pytest

from kiq.api.batches import Batches
from kiq.api.consistency import ReadAt, read_at
from kiq.api.errors import BadRequest, Unavailable
from kiq.partitioning import partition_for
from kiq.replicas import Replica
from kiq.replicas.reads import entry
from tests.unit.api.test_batches import KEYS, PARTITIONS, two_nodes

BATCH = ReadAt(consistent=True)


def write(replica: Replica, rows: dict[str, int], batch: int | None = None) -> None:
    """Writes ``rows`` (key → n) as the materializer would, then batch ``batch``'s marker."""
    at = replica.applied_offset
    changes = []
    for key, n in rows.items():
        at += 1
        changes.append((key.encode(), orjson.dumps({"n": n}), at))
    replica.batches.before_write(lambda key: entry(replica, key), changes)
    if batch is not None:
        at += 1
    replica.store.apply(changes, at)
    replica.position = at + 1
    if batch is not None:
        replica.batches.mark(batch, at, time.monotonic())


def mine(p: int) -> list[str]:
    return [k for k in KEYS if partition_for(k, PARTITIONS) == p]


def every_batch(n1: SimpleNamespace, n2: SimpleNamespace, batches: list[int]) -> None:
    """Each replica of every partition applies ``batches``: each key's n is the batch id."""
    for node in (n1, n2):
        for (_, p), replica in node.replicas.items():
            for b in batches:
                write(replica, dict.fromkeys(mine(p), b), b)


def test_a_multiget_answers_every_partition_as_of_the_oldest_newest_batch() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        every_batch(n1, n2, [4, 5])
        write(n2.replicas[("t", 2)], dict.fromkeys(mine(2), 6), 6)  # p2 is one batch ahead
        write(n1.replicas[("t", 0)], dict.fromkeys(mine(0), 99))  # under way: no marker yet
        body, headers = await batches.multiget("t", orjson.dumps({"keys": KEYS}), None, BATCH)
        got = orjson.loads(body)
        assert got["batch"] == 5 and headers["x-kiq-batch"] == "5"
        assert {k: v["n"] for k, v in got["found"].items()} == dict.fromkeys(KEYS, 5)
        assert headers["x-kiq-position"].startswith("t:0=")
        plain, _ = await batches.multiget("t", orjson.dumps({"keys": KEYS}), None)
        seen = {v["n"] for v in orjson.loads(plain)["found"].values()}
        assert seen == {5, 6, 99}  # without it: three states at once

    two_nodes(scenario)


def test_a_range_reads_one_batch_in_either_order() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        every_batch(n1, n2, [7])
        write(n2.replicas[("t", 3)], dict.fromkeys(mine(3), 8), 8)
        body, headers = await batches.range("t", {"limit": "1000"}, None, BATCH)
        page = orjson.loads(body)
        assert page["batch"] == 7 and headers["x-kiq-batch"] == "7"
        assert [i["key"] for i in page["items"]] == sorted(KEYS)
        assert {i["value"]["n"] for i in page["items"]} == {7}
        desc, _ = await batches.range("t", {"order": "desc", "limit": "5"}, None, BATCH)
        assert [i["key"] for i in orjson.loads(desc)["items"]] == sorted(KEYS)[::-1][:5]

    two_nodes(scenario)


def test_a_batch_no_replica_holds_any_more_is_a_503_to_retry() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        every_batch(n1, n2, [1])
        for p in (2, 3):  # only n2 holds them: it let batch 1 go
            replica = n2.replicas[("t", p)]
            replica.batches.keep_s = 0.0
            write(replica, dict.fromkeys(mine(p), 2), 2)
        with pytest.raises(Unavailable) as caught:
            await batches.multiget("t", orjson.dumps({"keys": KEYS}), None, BATCH)
        assert caught.value.headers == ((b"retry-after", b"1"),)
        assert "holds batch 1" in str(caught.value)

    two_nodes(scenario)


def test_a_table_with_no_markers_answers_as_it_is() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        body, headers = await batches.multiget("t", orjson.dumps({"keys": KEYS}), None, BATCH)
        got = orjson.loads(body)
        assert got["batch"] is None and "x-kiq-batch" not in headers
        assert sorted(got["found"]) == sorted(KEYS)

    two_nodes(scenario)


def test_a_position_is_answered_only_by_a_replica_that_applied_it() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        ahead = n2.replicas[("t", 0)]  # n2's standby of p0 is ahead of n1's active one
        write(ahead, dict.fromkeys(mine(0), 3))
        applied = ahead.applied_offset
        at = read_at("t", {}, f"t:0={applied}")
        found, _, unavailable, sources = await batches.get_many(
            batches.node.tables["t"], mine(0), None, at=at
        )
        assert {orjson.loads(v)["n"] for v in found.values()} == {3} and not unavailable
        assert [(s.served_by, s.applied_offset) for s in sources] == [(b"n2", applied)]
        beyond = read_at("t", {}, f"t:0={applied + 1}")
        _, _, unavailable, _ = await batches.get_many(
            batches.node.tables["t"], mine(0), None, at=beyond
        )
        assert sorted(unavailable) == sorted(mine(0))
        with pytest.raises(Unavailable, match="has applied the position asked"):
            await batches.range("t", {}, None, beyond)

    two_nodes(scenario)


def test_what_a_request_names_is_checked() -> None:
    assert read_at("t", {}, None) == ReadAt()
    assert read_at("t", {"consistent": "batch"}, None).consistent
    assert dict(read_at("t", {"after": "t:1=5;u:0=9"}, None).after) == {1: 5}
    assert dict(read_at("t", {"after": "t:1=5"}, "t:1=7").after) == {1: 7}  # the header wins
    for params, header in [({"consistent": "snapshot"}, None), ({}, "t:x=1"), ({}, "t" * 9000)]:
        with pytest.raises(BadRequest):
            read_at("t", params, header)


def test_a_position_behind_everywhere_is_waited_for_up_to_wait_ms() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        ahead = n2.replicas[("t", 0)]
        target = ahead.applied_offset + 3

        async def catch_up() -> None:
            await asyncio.sleep(0.15)
            write(ahead, dict.fromkeys(mine(0)[:3], 4))

        writer = asyncio.create_task(catch_up())
        at = read_at("t", {"wait_ms": "2000"}, f"t:0={target}")
        found, _, unavailable, _ = await batches.get_many(
            batches.node.tables["t"], mine(0), None, at=at
        )
        await writer
        assert not unavailable and {orjson.loads(found[k])["n"] for k in mine(0)[:3]} == {4}
        started = time.monotonic()
        late = read_at("t", {"wait_ms": "300"}, f"t:0={target + 100}")
        with pytest.raises(Unavailable):
            await batches.range("t", {}, None, late)
        assert 0.25 < time.monotonic() - started < 2

    two_nodes(scenario)


def test_a_replica_that_saw_markers_but_holds_none_yet_hands_the_read_on() -> None:
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        every_batch(n1, n2, [5])
        restarted = n1.replicas[("t", 0)]
        restarted.batches.clear()  # as after a restart: the log's marker seen, none held
        restarted.batches.saw()
        write(restarted, dict.fromkeys(mine(0), 77))  # the next batch, under way
        body, _ = await batches.multiget("t", orjson.dumps({"keys": KEYS}), None, BATCH)
        got = orjson.loads(body)
        assert got["batch"] == 5
        assert {k: v["n"] for k, v in got["found"].items()} == dict.fromkeys(KEYS, 5)

    two_nodes(scenario)

"""The bookings example (seed 002), end to end: its pipeline file run by `kiq pipeline
run`, its tables served by `kiq serve` nodes configured by its application file, every
answer compared with a reference computed here in plain Python.

Bookings arrive out of time order (the latest booking is the latest by ``booked_at``,
not by arrival) and with their times written in several ISO forms (a UTC offset, no
milliseconds), which the pipeline normalises to one fixed-width UTC form.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, topic_partitions
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.kafka_io import drain, produce
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bookings"
PARTITIONS = 6
CUSTOMERS = [f"c-{i:03d}" for i in range(12)] + ["zoë"]
TRIPS = ["BER-MUC", "HAM-FRA", "CGN-BER", "MUC-ZRH"]
START = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)
PLUS_2 = timezone(timedelta(hours=2))
NO_TRIP = json.dumps({"customer": "c-002", "booked_at": "2026-11-22T07:00:00Z"})
BAD = [
    ("c-001", "{not json", "not JSON, or a field of the wrong type"),
    ("c-002", NO_TRIP, "missing or malformed field trip"),
]


def iso(t: datetime) -> str:
    """The key's form: fixed-width UTC with milliseconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def as_sent(t: datetime, rng: random.Random) -> str:
    """The same instant in one of the ISO forms a producer may send."""
    form = rng.randrange(3)
    if form == 0:
        return iso(t)
    if form == 1:  # a UTC offset
        return t.astimezone(PLUS_2).isoformat(timespec="milliseconds")
    return iso(t.replace(microsecond=0))[:-5] + "Z"  # whole seconds, no fraction


def make_bookings(rng: random.Random, n: int) -> list[dict]:
    seen: set[tuple[str, str]] = set()
    out = []
    while len(out) < n:
        customer = rng.choice(CUSTOMERS)
        t = START + timedelta(milliseconds=rng.randrange(12 * 3600 * 1000))
        if rng.random() < 0.3:
            t = t.replace(microsecond=0)
        sent = as_sent(t, rng)
        t = datetime.fromisoformat(sent)  # what the record says, to the millisecond
        if (customer, iso(t)) in seen:
            continue
        seen.add((customer, iso(t)))
        out.append({"customer": customer, "trip": rng.choice(TRIPS), "booked_at": sent, "t": t})
    return out  # in random time order: arrival order is not time order


def reference(bookings: list[dict]) -> tuple[dict, dict]:
    latest: dict[str, dict] = {}
    by_time: dict[str, dict] = {}
    for b in bookings:
        row = {"customer": b["customer"], "trip": b["trip"], "booked_at": iso(b["t"])}
        by_time[f"{b['customer']}|{iso(b['t'])}"] = row
        best = latest.get(b["customer"])
        if best is None or (row["booked_at"], row["trip"]) > (best["booked_at"], best["trip"]):
            latest[b["customer"]] = row
    return latest, by_time


WINDOWS = [
    ("c-003", "2026-11-22T08:00", "2026-11-22T12:30"),
    ("c-007", "2026-11-22T06:00:00.000Z", "2026-11-22T18:00:00.000Z"),  # all of them
    ("zoë", "2026-11-22T09:15:30", "2026-11-22T15"),
    ("c-011", "2026-11-23", "2026-11-24"),  # none
]


def served(url: str) -> tuple[dict, list]:
    latest = {}
    for c in CUSTOMERS:
        resp = httpx.get(f"{url}/v1/tables/latest-booking/keys/{c}", timeout=10)
        latest[c] = resp.json() if resp.status_code == 200 else None
    ranges = []
    for customer, low, high in WINDOWS:
        params = {"from": f"{customer}|{low}", "to": f"{customer}|{high}", "limit": "1000"}
        resp = httpx.get(f"{url}/v1/tables/bookings-by-time/range", params=params, timeout=10)
        assert resp.status_code == 200, resp.text
        ranges.append([(i["key"], i["value"]) for i in resp.json()["items"]])
    return latest, ranges


def test_bookings_example_answers_exactly(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Every process reads the example's application file: the nodes take its tables.
    monkeypatch.setenv("KIQ_CONFIG", str(EXAMPLE / "kiq.toml"))
    create_topics(bootstrap, {"bookings": PARTITIONS})
    bookings = make_bookings(random.Random(2), 500)
    fields = ("customer", "trip", "booked_at")
    records = [(b["customer"], json.dumps({k: b[k] for k in fields})) for b in bookings]
    produce(bootstrap, "bookings", records[:250])
    produce(bootstrap, "bookings", [(k, v) for k, v, _ in BAD])
    produce(bootstrap, "bookings", records[250:])

    expected_latest, by_time = reference(bookings)
    expected_ranges = [
        sorted((k, v) for k, v in by_time.items() if f"{c}|{low}" <= k < f"{c}|{high}")
        for c, low, high in WINDOWS
    ]
    assert all(len(r) > 3 for r in expected_ranges[:3]) and not expected_ranges[3]
    # out of order: some customer's last booking to arrive is not their latest
    last_arrived = {b["customer"]: iso(b["t"]) for b in bookings}
    assert any(last_arrived[c] != expected_latest[c]["booked_at"] for c in CUSTOMERS)

    pipeline = LocalPipeline(
        (f"{EXAMPLE / 'pipeline.py'}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    cluster = Cluster(bootstrap, tmp_path, tables=[])
    try:
        pipeline.start()
        _wait_topics(bootstrap, ["latest-booking", "bookings-by-time"], pipeline)
        for i in (1, 2):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        deadline = time.monotonic() + 150
        while True:
            answers = [served(url) for url in cluster.live_urls()]
            if all(a == (expected_latest, expected_ranges) for a in answers):
                break
            if time.monotonic() > deadline or not pipeline.running:
                break
            time.sleep(2)
        for latest, ranges in answers:
            assert latest == expected_latest
            for got, want in zip(ranges, expected_ranges, strict=True):
                assert got == want
        # the application's own route shapes the same range
        customer, low, high = WINDOWS[0]
        url = f"{cluster.live_urls()[-1]}/v1/customers/{customer}/bookings"
        resp = httpx.get(url, params={"from": low, "to": high}, timeout=10)
        assert resp.status_code == 200, resp.text
        want_page = {"customer": customer, "bookings": [v for _, v in expected_ranges[0]]}
        assert resp.json() == {**want_page, "next_cursor": None}
        # A trip's bookings through its index, across every partition, paged: key order.
        for trip in TRIPS:
            want = [row for _, row in sorted(by_time.items()) if row["trip"] == trip]
            got: list[dict] = []
            cursor = None
            for url in cluster.live_urls():
                got, cursor = [], None
                while True:
                    params = {"limit": "17", **({"cursor": cursor} if cursor else {})}
                    resp = httpx.get(f"{url}/v1/trips/{trip}/bookings", params=params, timeout=10)
                    assert resp.status_code == 200, resp.text
                    got.extend(resp.json()["bookings"])
                    cursor = resp.json()["next_cursor"]
                    if cursor is None:
                        break
                assert got == want, (url, trip)
        # The tables were declared only in the pipeline; a serving side that says
        # otherwise (another separator) stops the node, naming both sides.
        tables = httpx.get(f"{cluster.live_urls()[0]}/v1/tables", timeout=10).json()["tables"]
        declared = {t["name"]: (t["sep"], t["declared"]["key"]) for t in tables}
        assert declared == {
            "latest-booking": (None, ["customer"]),
            "bookings-by-time": ("|", ["customer", "booked_at"]),
        }
        clash = LocalNode(
            "n9", bootstrap, ["bookings-by-time,sep=/"], tmp_path / "n9", tmp_path / "n9.log"
        ).start()
        try:
            assert clash.proc is not None and clash.proc.wait(60) != 0
        finally:
            clash.stop(10)
        said = " ".join(clash.log_file.read_text().split())
        assert "sep='/' here, '|' in the pipeline" in said, said[-2000:]
        assert "pipeline.build: topic 'bookings-by-time', key customer|booked_at" in said
    finally:
        pipeline.stop()
        cluster.shutdown()

    letters = drain(bootstrap, "bookings-dlq", expected=len(BAD), timeout_s=30)
    assert sorted(r.headers["kiq.reason"].decode() for r in letters) == sorted(r for *_, r in BAD)


def _wait_topics(bootstrap: str, topics: list[str], pipeline: LocalPipeline) -> None:
    deadline = time.monotonic() + 120
    while any(topic_partitions(bootstrap, t) != PARTITIONS for t in topics):
        assert pipeline.running, "the pipeline stopped: see its log"
        assert time.monotonic() < deadline, f"the pipeline did not create {topics}"
        time.sleep(0.5)

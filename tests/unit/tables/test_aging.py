"""Durations, the aging options of a table, and windowed keys' times."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kiq.errors import ConfigError
from kiq.tables import TableSpec, parse_table
from kiq.tables.declared import Declared, parse_served, resolve_tables
from kiq.tables.durations import format_duration, parse_duration
from kiq.tables.windows import split_window_key, window_time


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("10 seconds", 10_000),
        ("10s", 10_000),
        ("1 second", 1000),
        ("500ms", 500),
        ("15 minutes", 900_000),
        ("15m", 900_000),
        ("1.5 hours", 5_400_000),
        ("7 days", 604_800_000),
        ("2d", 172_800_000),
        ("1 week", 604_800_000),
        (30, 30_000),
        (timedelta(minutes=2), 120_000),
    ],
)
def test_durations_read_as_users_write_them(text: object, ms: int) -> None:
    assert parse_duration(text) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "soon", "7 fortnights", "0s", "-1s", True, None, "10"])
def test_a_bad_duration_says_what_it_wanted(bad: object) -> None:
    with pytest.raises(ConfigError, match="ttl"):
        parse_duration(bad, "ttl")  # type: ignore[arg-type]


def test_durations_format_in_their_largest_unit() -> None:
    assert [format_duration(ms) for ms in (604_800_000, 86_400_000, 90_000, 1500)] == [
        "1w",
        "1d",
        "90s",
        "1500ms",
    ]


def test_the_table_flag_takes_ttl_and_retention() -> None:
    spec = parse_table("events=events,ttl=10s")
    assert (spec.ttl_ms, spec.retention_ms, spec.windowed) == (10_000, None, False)
    windowed = parse_table("bars=bars,sep=|,retention=2 days")
    assert (windowed.retention_ms, windowed.windowed) == (172_800_000, True)
    with pytest.raises(ConfigError, match="ttl"):
        parse_table("events=events,ttl=forever")


def test_retention_needs_a_windowed_table_and_rank_by_json() -> None:
    with pytest.raises(ConfigError, match="windowed"):
        TableSpec("t", "t", retention_ms=1000)
    with pytest.raises(ConfigError, match="JSON"):
        TableSpec("t", "t", format="raw", rank_by="count")
    with pytest.raises(ConfigError, match="positive"):
        TableSpec("t", "t", ttl_ms=0)


DECLARED = Declared(
    table="visits",
    topic="visits",
    key=("user",),
    sep="|",
    window="w",
    retention_ms=3_600_000,
    ttl_ms=86_400_000,
    rank_by="views",
)


def test_the_catalog_carries_aging_and_rank_and_serve_may_age_differently() -> None:
    (spec,) = resolve_tables([], {"visits": DECLARED}, app="kiq")
    assert (spec.windowed, spec.retention_ms, spec.ttl_ms, spec.rank_by) == (
        True,
        3_600_000,
        86_400_000,
        "views",
    )
    assert spec.declared is not None and spec.declared["window"] == "w"
    served = parse_served("visits,ttl=1h,retention=30m")
    (shorter,) = resolve_tables([served], {"visits": DECLARED}, app="kiq")
    assert (shorter.ttl_ms, shorter.retention_ms) == (3_600_000, 1_800_000)


def test_retention_on_a_table_its_pipeline_does_not_window_is_refused() -> None:
    plain = Declared(table="totals", topic="totals", key=("c",))
    with pytest.raises(ConfigError, match="no windowed table"):
        resolve_tables([parse_served("totals,sep=|,retention=1h")], {"totals": plain}, app="kiq")


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("2026-11-25T10:00:00Z", "2026-11-25T10:00:00.000Z"),
        ("2026-11-25T10:00", "2026-11-25T10:00:00.000Z"),
        ("2026-11-25", "2026-11-25T00:00:00.000Z"),
        ("1795600800000", "2026-11-25T10:00:00.000Z"),
        ("2026-11-25T11:00:00+01:00", "2026-11-25T10:00:00.000Z"),
        ("2026-11-25T10:00:00.123456Z", "2026-11-25T10:00:00.123Z"),
    ],
)
def test_window_times_are_written_as_keys_write_them(given: str, written: str) -> None:
    assert window_time(given) == written


def test_a_window_time_that_is_no_time_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="from 'soon' is not a time"):
        window_time("soon", "from")


def test_a_windowed_key_splits_into_entity_start_and_end() -> None:
    key = "a|b|2026-11-25T10:00:00.000Z|2026-11-25T10:01:00.000Z"
    assert split_window_key(key, "|") == (
        "a|b",
        "2026-11-25T10:00:00.000Z",
        "2026-11-25T10:01:00.000Z",
    )

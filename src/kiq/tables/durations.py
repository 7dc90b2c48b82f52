"""Durations as users write them (``"7 days"``, ``"10s"``, ``"1 hour"``), in milliseconds.

One parser for ``ctx.write_table(ttl=, retention=)`` and the ``--table`` options
``ttl=`` and ``retention=``, so both sides read the same words.
"""

from __future__ import annotations

import re
from datetime import timedelta

from kiq.errors import ConfigError

# What a duration may be given as: text ("7 days"), seconds, or a timedelta.
Duration = str | int | float | timedelta

_UNITS = {
    "ms": 1,
    "millisecond": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "w": 604_800_000,
    "week": 604_800_000,
}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")
EXAMPLES = '"10 seconds", "30s", "15 minutes", "1 hour", "7 days"'


def parse_duration(value: Duration, what: str = "duration") -> int:
    """``value`` in milliseconds: a ``timedelta``, a number of seconds, or text such as
    ``"7 days"``; a ``ConfigError`` naming ``what`` for anything else or not positive."""
    if isinstance(value, timedelta):
        ms = round(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = round(value * 1000)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        amount, unit = match.groups()
        unit = unit.lower()
        scale = _UNITS.get(unit) or _UNITS.get(unit.removesuffix("s"))
        if scale is None:
            raise ConfigError(f"{what} {value!r}: unknown unit {unit!r}; e.g. {EXAMPLES}")
        ms = round(float(amount) * scale)
    else:
        raise ConfigError(f"{what} {value!r} is not a duration; e.g. {EXAMPLES}")
    if ms <= 0:
        raise ConfigError(f"{what} {value!r} must be longer than zero")
    return ms


def format_duration(ms: int) -> str:
    """``ms`` in the largest unit that divides it: ``7d``, ``90s``, ``1500ms``."""
    for unit, scale in (
        ("w", 604_800_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ):
        if ms % scale == 0:
            return f"{ms // scale}{unit}"
    return f"{ms}ms"

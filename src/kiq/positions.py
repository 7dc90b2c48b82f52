"""Position tokens: what a caller has seen, as (table, partition) → applied offset.

Every read answer carries one (``X-Kiq-Position``); a caller sends back the largest it
has seen (``X-Kiq-After`` or ``?after=``) and no node answers from a replica behind it:
reads never go back in time, across nodes, workers, standbys and failovers. A write
through an application route returns the offsets it produced the same way.

The token is text a caller may hand-write or mangle, so ``decode`` takes it as
untrusted: bounded in length and entries before anything is parsed, every name and
number checked, and any fault one ``BadPosition`` (a 400), never a crash.

Form: ``TABLE:P=O,P=O;TABLE:P=O`` (table names hold none of ``:;,=``; a table version's
internal name, ``NAME@VERSION``, is one), sorted, so one position has one token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kiq.errors import KiqError

# (table, partition) → the offset a replica must have applied to answer
Position = dict[tuple[str, int], int]

HEADER = "x-kiq-position"  # on answers
AFTER_HEADER = "x-kiq-after"  # on requests (or ``?after=``)
MAX_TOKEN_CHARS = 8192  # a header's worth
MAX_ENTRIES = 1024  # (table, partition) pairs in one token
OFFSET_LIMIT = 2**63
_TABLE = re.compile(r"[A-Za-z0-9._@-]{1,100}")
_MAX_DIGITS = len(str(OFFSET_LIMIT - 1))
# A well-formed token in one match (C speed: a lookup reads one on the hot path); the
# part-by-part parse below stays the definition, and says what is wrong with the rest.
_PAIR = rf"[0-9]{{1,9}}=[0-9]{{1,{_MAX_DIGITS}}}"
_PART = rf"[A-Za-z0-9._@-]{{1,100}}:{_PAIR}(?:,{_PAIR})*"
_WHOLE = re.compile(rf"{_PART}(?:;{_PART})*")
_LONGEST = re.compile(rf"[0-9]{{{_MAX_DIGITS}}}")  # a number that may be past OFFSET_LIMIT


class BadPosition(KiqError, ValueError):
    """A token that is not one kiq wrote: too long, malformed, or out of range."""


def encode(position: Mapping[tuple[str, int], int]) -> str:
    """The token of ``position`` (empty for an empty one)."""
    by_table: dict[str, list[tuple[int, int]]] = {}
    for (table, partition), offset in position.items():
        by_table.setdefault(table, []).append((partition, offset))
    return ";".join(
        f"{table}:" + ",".join(f"{p}={o}" for p, o in sorted(parts))
        for table, parts in sorted(by_table.items())
    )


def decode(token: str) -> Position:
    """``token`` as a position; ``BadPosition`` naming what is wrong with it."""
    if len(token) <= MAX_TOKEN_CHARS and _WHOLE.fullmatch(token):
        out: Position = {}
        for part in token.split(";"):
            table, _, rest = part.partition(":")
            for pair in rest.split(","):
                p, _, o = pair.partition("=")
                key, offset = (table, int(p)), int(o)
                if offset >= OFFSET_LIMIT:
                    return _decode(token)  # to say which
                if offset > out.get(key, -1):
                    out[key] = offset
        if len(out) <= MAX_ENTRIES:
            return out
    return _decode(token)


def offset_of(token: str, table: str, partition: int) -> int | None:
    """``decode(token)``'s offset of ``table``'s ``partition`` (None when it names none),
    without building the position: what a lookup needs of a token. ``BadPosition`` as
    ``decode``; a token it would have to count or range-check is left to it."""
    if (
        len(token) > MAX_TOKEN_CHARS
        or not _WHOLE.fullmatch(token)
        or token.count("=") > MAX_ENTRIES
        or _LONGEST.search(token)
    ):
        return decode(token).get((table, partition))
    found: int | None = None
    head = table + ":"
    for part in token.split(";"):
        if part.startswith(head):
            for pair in part[len(head) :].split(","):
                p, _, o = pair.partition("=")
                if int(p) == partition and (found is None or int(o) > found):
                    found = int(o)
    return found


def _decode(token: str) -> Position:
    """``decode``, part by part: the definition, and what says what is wrong."""
    if len(token) > MAX_TOKEN_CHARS:
        raise BadPosition(f"a position token is at most {MAX_TOKEN_CHARS} characters")
    out: Position = {}
    if not token:
        return out
    for part in token.split(";"):
        table, colon, rest = part.partition(":")
        if not colon or not _TABLE.fullmatch(table):
            raise BadPosition(f"a position token's part must be TABLE:P=O,...: {part[:60]!r}")
        for pair in rest.split(","):
            p, eq, o = pair.partition("=")
            partition, offset = _number(p, 9), _number(o, _MAX_DIGITS)
            if not eq or partition is None or offset is None or offset >= OFFSET_LIMIT:
                raise BadPosition(f"a position token's entry must be P=O: {pair[:60]!r}")
            key = (table, partition)
            out[key] = max(offset, out.get(key, -1))
            if len(out) > MAX_ENTRIES:
                raise BadPosition(f"a position token names at most {MAX_ENTRIES} partitions")
    return out


def merge(*positions: Mapping[tuple[str, int], int]) -> Position:
    """The least position at or past each of ``positions``: the largest offset of each."""
    out: Position = {}
    for position in positions:
        for key, offset in position.items():
            if offset > out.get(key, -1):
                out[key] = offset
    return out


def of_table(position: Mapping[tuple[str, int], int], table: str) -> dict[int, int]:
    """``position``'s offsets of ``table``'s partitions."""
    return {p: o for (t, p), o in position.items() if t == table}


def at(table: str, offsets: Iterable[tuple[int, int]]) -> Position:
    """A position of ``table`` from (partition, offset) pairs, skipping unknown (-1) ones."""
    return {(table, p): o for p, o in offsets if o >= 0}


def _number(text: str, digits: int) -> int | None:
    """``text`` as a non-negative int of at most ``digits`` ASCII digits, else None."""
    if not 0 < len(text) <= digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)

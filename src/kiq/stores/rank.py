"""The order of a ranked table (``TableSpec.rank_by``): by a numeric field of the JSON value.

Highest score first, ties by key ascending. A store keeps its partition's keys in that
order as index keys ``score + key`` whose byte order is the rank order: ``score`` is the
field's value as an 8-byte big-endian IEEE double made order-preserving (positives get
the sign bit set, negatives all bits flipped) and then complemented, so ascending bytes
are descending scores. The node that asks every partition for its head merges the heads
with the same key (``merge_heads``), so the two orders never differ.

A value whose field is missing, not a number (``true`` is not one), not finite, or that
is not a JSON object is not ranked: it is stored and served, never in a top.

A top within one window of a windowed table (``starts_window``) reads the same order and
keeps the keys of windows starting at that time, reading on until it has ``n`` of them.
"""

from __future__ import annotations

import functools
import heapq
import struct
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from kiq.stores.index import number_of

SCORE_SIZE = 8
_DOUBLE = struct.Struct(">d")
_BITS = struct.Struct(">Q")
_SIGN = 1 << 63
_ALL = (1 << 64) - 1
_COMPLEMENT = bytes(255 - b for b in range(256))


def encode_score(score: float) -> bytes:
    """``score`` as 8 bytes whose ascending byte order is descending score."""
    # Order-preserving: negatives flipped, positives with the sign bit set; then complemented.
    # Together: a negative keeps its bits, a positive's are those of its negation (the sign
    # bit set) complemented. Bytes, not a 64-bit integer: that arithmetic cost 0.3 µs.
    score += 0.0  # -0.0 ranks as 0.0
    if score < 0.0:
        return _DOUBLE.pack(score)
    return _DOUBLE.pack(-score).translate(_COMPLEMENT)


def decode_score(raw: bytes) -> float:
    """What ``encode_score`` encoded."""
    (bits,) = _BITS.unpack(raw)
    return float(_DOUBLE.unpack(_BITS.pack(bits if bits & _SIGN else (bits ^ _ALL) & ~_SIGN))[0])


class Scorer:
    """The encoded score of a stored JSON value by one field, the rest of the value skipped
    unparsed (msgspec decodes into a struct of that field alone): a restore of a ranked
    table parsed every value whole for one number, which cost more than storing it."""

    __slots__ = ("_decode", "field")

    def __init__(self, field: str) -> None:
        self.field = field
        shape = msgspec.defstruct("Ranked", [("f0", Any, None)], rename={"f0": field}, gc=False)
        self._decode: Callable[[bytes], Any] = msgspec.json.Decoder(shape).decode

    def __call__(self, value: bytes) -> bytes | None:
        """None: not ranked (not a JSON object, the field missing or not a finite number)."""
        return self.many((value,))[0]

    def many(self, values: Iterable[bytes | None]) -> list[bytes | None]:
        """Each value's score (None for a tombstone too), in one call: per value, a call
        cost as much as the decode."""
        decode, pack, complement = self._decode, _DOUBLE.pack, _COMPLEMENT
        out: list[bytes | None] = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            try:
                found = decode(value).f0
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.append(None)
                continue
            if type(found) is float:  # the common case inline, as encode_score
                if found - found != 0.0:  # inf - inf and nan - nan are nan
                    out.append(None)
                elif found < 0.0:
                    out.append(pack(found))
                else:
                    out.append(pack(-(found + 0.0)).translate(complement))
                continue
            score = number_of(found)
            out.append(None if score is None else encode_score(score))
        return out


@functools.lru_cache(maxsize=256)
def scorer_of(field: str) -> Scorer:
    """One ``Scorer`` per field (building one defines a msgspec struct: tens of µs)."""
    return Scorer(field)


def score_of(field: str, value: bytes) -> bytes | None:
    """The encoded score of ``value`` (a stored JSON object) by ``field``; None: not ranked."""
    return scorer_of(field)(value)


def starts_window(key: bytes, start: bytes) -> bool:
    """Whether a windowed table's ``key`` (``ENTITY|START|END``, START and END of one fixed
    width, ``kiq.tables.windows``) is of a window starting at ``start``: a top within one
    window ("top pages this hour") keeps only those."""
    width = len(start)
    return len(key) > 2 * width + 1 and key[-2 * width - 1 : -width - 1] == start


def merge_heads(
    heads: Iterable[Iterable[tuple[bytes, bytes]]], n: int, field: str
) -> list[tuple[bytes, bytes]]:
    """The first ``n`` (key, value) of every partition's head together, in rank order.

    Each head is a partition's first ``n`` (or all its ranked keys): the first ``n`` of
    them all are then the first ``n`` of the table. An item that is not ranked (a node
    that ranks differently) is left out.
    """
    ranked: list[tuple[bytes, bytes, bytes]] = []
    scorer = scorer_of(field)
    for head in heads:
        for key, value in head:
            score = scorer(value)
            if score is not None:
                ranked.append((score + key, key, value))
    return [(key, value) for _, key, value in heapq.nsmallest(n, ranked)]

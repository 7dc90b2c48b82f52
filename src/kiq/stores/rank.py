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

import heapq
import struct
from collections.abc import Iterable

import orjson

from kiq.stores.index import number_of

SCORE_SIZE = 8
_DOUBLE = struct.Struct(">d")
_BITS = struct.Struct(">Q")
_SIGN = 1 << 63
_ALL = (1 << 64) - 1


def encode_score(score: float) -> bytes:
    """``score`` as 8 bytes whose ascending byte order is descending score."""
    (bits,) = _BITS.unpack(_DOUBLE.pack(score + 0.0))  # + 0.0: -0.0 ranks as 0.0
    # Order-preserving: negatives flipped, positives with the sign bit set; then complemented.
    # Together: a negative keeps its bits, a positive has all but the sign bit flipped.
    return _BITS.pack(bits if bits & _SIGN else (bits | _SIGN) ^ _ALL)


def decode_score(raw: bytes) -> float:
    """What ``encode_score`` encoded."""
    (bits,) = _BITS.unpack(raw)
    return float(_DOUBLE.unpack(_BITS.pack(bits if bits & _SIGN else (bits ^ _ALL) & ~_SIGN))[0])


def score_of(field: str, value: bytes) -> bytes | None:
    """The encoded score of ``value`` (a stored JSON object) by ``field``; None: not ranked."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    score = number_of(doc.get(field))
    return None if score is None else encode_score(score)


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
    for head in heads:
        for key, value in head:
            score = score_of(field, value)
            if score is not None:
                ranked.append((score + key, key, value))
    return [(key, value) for _, key, value in heapq.nsmallest(n, ranked)]

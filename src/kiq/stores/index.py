"""Secondary indexes: a table's keys ordered by a field of the JSON value (``TableSpec.index``).

A store keeps, for each indexed field, entries ``encode_value(field's value) + key`` whose
byte order is the field's order (ties by key), so an equality or a range of the field is
one contiguous run of entries: ``equal_bounds`` and ``range_bounds`` give its ends. The
encoding is self-delimiting (``key_of`` finds the key in an entry) and the same in every
replica and every partition, so the node that asks each partition for its part merges
the answers by comparing entries' bytes, and a cursor is the last entry a page ended on.

What is indexed: a number (not ``true``/``false``, finite, within a double's range;
``120`` and ``120.0`` are one value) or a text of at most ``MAX_TEXT`` bytes of UTF-8.
A value whose field is missing, ``null``, of another type or longer, or that is not a
JSON object, has no entry for that field: it is stored and served, never found by it.
Numbers sort before texts.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from kiq.stores.base import prefix_end

# The longest text (UTF-8 bytes) a field may have to be indexed: entries stay small.
MAX_TEXT = 512

IndexKind = Literal["text", "number"]
# Characters a text may have to be indexed without measuring its UTF-8 (4 bytes at most each).
_SHORT_TEXT = MAX_TEXT // 4

_NUMBER = b"\x02"
_TEXT = b"\x03"
_AFTER_TEXT = b"\x04"
# Text: its UTF-8 bytes with 0x00 written 0x00 0xFF, then the terminator 0x00 0x01, so a
# shorter text sorts before any longer one it begins and the first 0x00 0x01 ends it.
_ESCAPE = b"\x00\xff"
_END_TEXT = b"\x00\x01"
_NUMBER_SIZE = 1 + 8
_DOUBLE = struct.Struct(">d")
_BITS = struct.Struct(">Q")
_SIGN = 1 << 63
_ALL = (1 << 64) - 1


def encode_number(number: float) -> bytes:
    """``number`` as 9 bytes whose ascending byte order is ascending number."""
    (bits,) = _BITS.unpack(_DOUBLE.pack(number + 0.0))  # + 0.0: -0.0 is 0.0
    return _NUMBER + _BITS.pack(bits ^ _ALL if bits & _SIGN else bits | _SIGN)


def encode_text(text: str) -> bytes:
    """``text`` as bytes whose ascending order is the ascending byte order of its UTF-8."""
    return _TEXT + text.encode().replace(b"\x00", _ESCAPE) + _END_TEXT


def encode_value(value: str | float) -> bytes:
    """An indexed value's encoding (a ``str`` as text, anything else as a number)."""
    return encode_text(value) if isinstance(value, str) else encode_number(value)


def key_of(entry: bytes) -> bytes:
    """The table key an index entry is of."""
    if entry[:1] == _NUMBER:
        return entry[_NUMBER_SIZE:]
    return entry[entry.index(_END_TEXT) + 2 :]


def value_of(entry: bytes) -> str | float:
    """The field's value an index entry holds."""
    if entry[:1] == _NUMBER:
        (bits,) = _BITS.unpack(entry[1:_NUMBER_SIZE])
        return float(_DOUBLE.unpack(_BITS.pack(bits ^ _SIGN if bits & _SIGN else bits ^ _ALL))[0])
    return entry[1 : entry.index(_END_TEXT)].replace(_ESCAPE, b"\x00").decode()


def equal_bounds(value: str | float) -> tuple[bytes, bytes]:
    """[start, end) of the entries whose field equals ``value``, in key order."""
    prefix = encode_value(value)
    end = prefix_end(prefix)
    assert end is not None  # an encoding starts with 0x02 or 0x03
    return prefix, end


def range_bounds(
    kind: IndexKind, low: str | float | None, high: str | float | None
) -> tuple[bytes, bytes]:
    """[start, end) of the entries whose field is between ``low`` and ``high``, both
    included (None: unbounded on that side), of an index of ``kind``."""
    first, past = (_NUMBER, _TEXT) if kind == "number" else (_TEXT, _AFTER_TEXT)
    start = first if low is None else encode_value(low)
    end = past if high is None else equal_bounds(high)[1]
    return start, end


def kind_of(entry: bytes) -> IndexKind:
    """Whether an entry holds a number or a text."""
    return "number" if entry[:1] == _NUMBER else "text"


class Extractor:
    """Reads the indexed fields of a stored JSON value, skipping the rest of it unparsed
    (msgspec decodes into a struct of those fields only)."""

    __slots__ = ("_decoder", "fields")

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)
        names = [f"f{i}" for i in range(len(self.fields))]
        shape = msgspec.defstruct(
            "Indexed",
            [(name, Any, None) for name in names],
            rename=dict(zip(names, self.fields, strict=True)),
            gc=False,
        )
        self._decoder = msgspec.json.Decoder(shape)

    def __call__(self, value: bytes) -> list[bytes | None]:
        """Each field's encoded value (``encode_value``), None where it is not indexed."""
        try:
            doc = self._decoder.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return [None] * len(self.fields)
        # A short text and a float (the common cases) inline: a call per field costs as
        # much as the decode.
        out: list[bytes | None] = []
        for v in msgspec.structs.astuple(doc):
            kind = type(v)
            if kind is str and len(v) <= _SHORT_TEXT:
                out.append(_TEXT + v.encode().replace(b"\x00", _ESCAPE) + _END_TEXT)
            elif kind is float and v - v == 0.0:  # finite: inf - inf and nan - nan are nan
                (bits,) = _BITS.unpack(_DOUBLE.pack(v + 0.0))
                out.append(_NUMBER + _BITS.pack(bits ^ _ALL if bits & _SIGN else bits | _SIGN))
            else:
                out.append(_encoded(v))
        return out


@functools.lru_cache(maxsize=256)
def extractor_of(fields: tuple[str, ...]) -> Extractor:
    """One ``Extractor`` per tuple of fields, for readers that re-encode values as they go
    (building one defines a msgspec struct: tens of µs)."""
    return Extractor(fields)


def _encoded(found: Any) -> bytes | None:
    if isinstance(found, str):
        short = len(found) <= _SHORT_TEXT or len(found.encode()) <= MAX_TEXT
        return encode_text(found) if short else None
    number = number_of(found)
    return None if number is None else encode_number(number)


def number_of(found: Any) -> float | None:
    """A JSON value as a finite double; None for anything else (``true`` is no number, nor
    an integer beyond a double's range)."""
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    try:
        number = float(found)
    except OverflowError:  # an integer beyond a double's range
        return None
    return number if math.isfinite(number) else None

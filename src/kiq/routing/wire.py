"""The node-to-node lookup batch: ``POST /v1/internal/lookups``, msgpack both ways.

The request body is an array of ``Lookup`` records, the response an array of
``LookupResult`` records in the same order. Records are msgpack arrays, not maps
(``array_like``), so a lookup costs a few bytes beyond its key and value:

    Lookup        [table, key(bin), max_lag|nil, min_offset|nil, wait_ms]
    LookupResult  [status, partition, lag, stale, served_by(bin), offset, value(bin), reason]

Per-item statuses: 200 found, 404 not found, 421 no usable replica here, 503
``min_offset`` not reached within ``wait_ms``, 400 a malformed key. ``FAILED``
never travels: the batcher gives it to every item of a request that got no answer.
"""

from __future__ import annotations

from typing import Final

import msgspec

INTERNAL_LOOKUPS: Final = "/v1/internal/lookups"
MSGPACK: Final = "application/msgpack"
FAILED: Final = 0  # the target could not be reached, or did not answer the batch


class Lookup(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One key to look up in the receiver's own replica."""

    table: str
    key: bytes
    max_lag: int | None = None
    min_offset: int | None = None
    wait_ms: int = 0


class LookupResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The answer for one key; ``served_by`` is bytes as it goes into a header as is."""

    status: int
    partition: int = -1
    lag: int = 0
    stale: bool = False
    served_by: bytes = b""
    offset: int = -1
    value: bytes = b""
    reason: str = ""  # why there is no answer (421, 503, 400, FAILED)


_encoder = msgspec.msgpack.Encoder()
_lookups = msgspec.msgpack.Decoder(list[Lookup])
_results = msgspec.msgpack.Decoder(list[LookupResult])

DecodeError = msgspec.DecodeError


def encode(records: list[Lookup] | list[LookupResult]) -> bytes:
    return _encoder.encode(records)


def decode_lookups(body: bytes) -> list[Lookup]:
    """Raises ``DecodeError`` (or its subclass ``ValidationError``) on a malformed body."""
    return _lookups.decode(body)


def decode_results(body: bytes) -> list[LookupResult]:
    return _results.decode(body)

"""Record value → the bytes a table stores and serves.

Decoding happens once, when a record is applied, never per request: every
table serves JSON (or raw bytes as they came), whatever its topic carries. A
value that cannot be decoded raises ``BadRecord`` for the dead-letter topic.
Tombstones (null values) never reach a codec.
"""

from __future__ import annotations

import abc
import decimal
import io
from pathlib import Path
from typing import Any

import fastavro
import msgspec
import orjson

from kiq.errors import BadRecord, ConfigError
from kiq.tables.spec import TableSpec

_MAX_REASON = 200


class ValueCodec(abc.ABC):
    """Validates or converts one record value."""

    @abc.abstractmethod
    def decode(self, raw: bytes) -> bytes:
        """The bytes to store and serve for ``raw``; raises ``BadRecord``."""

    def decode_all(self, raws: list[bytes | None]) -> list[bytes | None]:
        """``decode`` for a whole fetch (``None``, a tombstone, stays ``None``).

        Raises ``BadRecord`` if any value is bad, without saying which: the
        caller then decodes one by one to find it. Codecs override this when a
        batch can be checked for less than the sum of its values.
        """
        decode = self.decode
        return [None if raw is None else decode(raw) for raw in raws]


class RawCodec(ValueCodec):
    """Bytes as they are: for values kiq need not understand."""

    def decode(self, raw: bytes) -> bytes:
        return raw

    def decode_all(self, raws: list[bytes | None]) -> list[bytes | None]:
        return raws


class JsonCodec(ValueCodec):
    """Checks the value is UTF-8 JSON and keeps the producer's bytes unchanged.

    Restores run through here once per record, so the check builds nothing:
    msgspec parses into ``Raw`` (syntax only, several times cheaper than
    building objects), and a UTF-8 decode covers what that skips.
    """

    _syntax = msgspec.json.Decoder(msgspec.Raw)
    _array_syntax = msgspec.json.Decoder(list[msgspec.Raw])

    def decode(self, raw: bytes) -> bytes:
        try:
            raw.decode("utf-8")
            self._syntax.decode(raw)
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            raise BadRecord(_reason("invalid JSON", exc)) from None
        return raw

    def decode_all(self, raws: list[bytes | None]) -> list[bytes | None]:
        """One parse for the whole fetch: its values joined into one JSON array.

        The array parses into exactly the values when it has as many elements
        as there are values and each element is as long as its value: then
        no element can straddle a comma we inserted, nor hide one inside it.
        """
        values = [raw for raw in raws if raw is not None]
        if not values:
            return raws
        joined = b"[" + b",".join(values) + b"]"
        try:
            joined.decode("utf-8")
            elements = self._array_syntax.decode(joined)
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            raise BadRecord(_reason("invalid JSON", exc)) from None
        if list(map(len, elements)) != list(map(len, values)):
            raise BadRecord("invalid JSON: a value is not one JSON document")
        return raws


class AvroCodec(ValueCodec):
    """Schemaless Avro binary (no registry framing) with one schema, served as JSON."""

    def __init__(self, schema_file: Path) -> None:
        try:
            self._schema = fastavro.parse_schema(orjson.loads(Path(schema_file).read_bytes()))
        except Exception as exc:  # unreadable, not JSON, or not a valid Avro schema
            raise ConfigError(f"Avro schema {str(schema_file)!r} cannot be used: {exc}") from None

    def decode(self, raw: bytes) -> bytes:
        buf = io.BytesIO(raw)
        try:
            record = fastavro.schemaless_reader(buf, self._schema, None)
        except Exception as exc:  # any failure on untrusted bytes is a bad record
            raise BadRecord(_reason("invalid Avro", exc)) from None
        if buf.tell() != len(raw):
            raise BadRecord(f"invalid Avro: {len(raw) - buf.tell()} bytes left after the record")
        try:
            return orjson.dumps(record, default=_json_default)
        except orjson.JSONEncodeError as exc:
            raise BadRecord(_reason("Avro record has no JSON form", exc)) from None


def codec_for(spec: TableSpec) -> ValueCodec:
    """The codec for ``spec.format``."""
    if spec.format == "avro":
        assert spec.schema_file is not None  # TableSpec guarantees it
        return AvroCodec(spec.schema_file)
    if spec.format == "raw":
        return RawCodec()
    return JsonCodec()


def _json_default(obj: Any) -> Any:
    """JSON for the Avro values orjson does not know, as Avro's JSON encoding has them."""
    if isinstance(obj, bytes):
        return obj.decode("latin-1")  # bytes/fixed: one code point per byte
    if isinstance(obj, decimal.Decimal):
        return str(obj)  # exact, unlike a float
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _reason(what: str, exc: Exception) -> str:
    detail = str(exc) or type(exc).__name__
    return f"{what}: {detail}"[:_MAX_REASON]

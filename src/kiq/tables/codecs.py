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
import orjson

from kiq.errors import BadRecord, ConfigError
from kiq.tables.spec import TableSpec

_MAX_REASON = 200


class ValueCodec(abc.ABC):
    """Validates or converts one record value."""

    @abc.abstractmethod
    def decode(self, raw: bytes) -> bytes:
        """The bytes to store and serve for ``raw``; raises ``BadRecord``."""


class RawCodec(ValueCodec):
    """Bytes as they are: for values kiq need not understand."""

    def decode(self, raw: bytes) -> bytes:
        return raw


class JsonCodec(ValueCodec):
    """Checks the value is UTF-8 JSON and keeps the producer's bytes unchanged."""

    def decode(self, raw: bytes) -> bytes:
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRecord(_reason("invalid JSON", exc)) from None
        return raw


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

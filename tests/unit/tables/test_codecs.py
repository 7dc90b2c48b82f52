from __future__ import annotations

import decimal
import io
from pathlib import Path

import fastavro
import orjson
import pytest

from kiq.errors import BadRecord, ConfigError
from kiq.tables import TableSpec, codec_for
from kiq.tables.codecs import AvroCodec, JsonCodec, RawCodec

SCHEMA = {
    "type": "record",
    "name": "Quote",
    "fields": [
        {"name": "symbol", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "volume", "type": ["null", "long"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "raw", "type": "bytes"},
        {
            "name": "exact",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "quote.avsc"
    path.write_bytes(orjson.dumps(SCHEMA))
    return path


def avro(record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), record)
    return buf.getvalue()


RECORD = {
    "symbol": "東京",
    "price": 12.5,
    "volume": 300,
    "tags": ["a", "b"],
    "raw": b"\x00\xff",
    "exact": decimal.Decimal("1234.56"),
}


def test_json_keeps_the_original_bytes():
    raw = b'{ "b": 1,  "a": [true, null, "\xc3\xa9"] }'
    assert JsonCodec().decode(raw) is raw


@pytest.mark.parametrize(
    "raw", [b'{"a":1', b"", b"NaN", b"\xff\xfe", b"{'a': 1}", b'"\xed\xa0\x80"']
)
def test_json_rejects_invalid(raw: bytes):
    with pytest.raises(BadRecord) as info:
        JsonCodec().decode(raw)
    assert info.value.reason.startswith("invalid JSON: ")
    assert len(info.value.reason) <= 200


def test_avro_round_trip_serves_json(schema_file: Path):
    served = AvroCodec(schema_file).decode(avro(RECORD))
    assert orjson.loads(served) == {
        "symbol": "東京",
        "price": 12.5,
        "volume": 300,
        "tags": ["a", "b"],
        "raw": "\u0000\u00ff",  # Avro's JSON form of bytes: one code point per byte
        "exact": "1234.56",
    }


def test_avro_null_union(schema_file: Path):
    served = AvroCodec(schema_file).decode(avro({**RECORD, "volume": None}))
    assert orjson.loads(served)["volume"] is None


def test_avro_rejects_truncated_and_trailing_bytes(schema_file: Path):
    codec = AvroCodec(schema_file)
    good = avro(RECORD)
    with pytest.raises(BadRecord, match=r"^invalid Avro"):
        codec.decode(good[:5])
    with pytest.raises(BadRecord, match="bytes left after the record"):
        codec.decode(good + b"\x02")


def test_avro_bad_schema_is_a_config_error(tmp_path: Path):
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}')
    with pytest.raises(ConfigError, match=r"bad\.avsc"):
        AvroCodec(bad)
    not_json = tmp_path / "nj.avsc"
    not_json.write_text("{")
    with pytest.raises(ConfigError, match="cannot be used"):
        AvroCodec(not_json)


def test_raw_passes_bytes_through():
    assert RawCodec().decode(b"\x00\xffnot json") == b"\x00\xffnot json"


def test_codec_for_each_format(schema_file: Path):
    assert isinstance(codec_for(TableSpec(name="t", topic="t")), JsonCodec)
    assert isinstance(codec_for(TableSpec(name="t", topic="t", format="raw")), RawCodec)
    spec = TableSpec(name="t", topic="t", format="avro", schema_file=schema_file)
    codec = codec_for(spec)
    assert isinstance(codec, AvroCodec)
    assert orjson.loads(codec.decode(avro(RECORD)))["symbol"] == "東京"


@pytest.mark.parametrize(
    "raws",
    [
        [b'{"a":1}', None, b"[1,2]", b'"x"', b"3"],
        [None],
        [],
    ],
)
def test_json_decode_all_keeps_valid_values(raws: list[bytes | None]):
    assert JsonCodec().decode_all(raws) == raws


@pytest.mark.parametrize(
    "raws",
    [
        [b'{"a":1}', b'{"a":'],  # one broken value
        [b"1,2", b"3"],  # two documents in one value
        [b"[1", b"2]"],  # a value that only parses joined with the next
        [b"[1", b"2]", b"3,4"],  # as many elements as values, at other boundaries
        [b" 1", b"2"],  # valid alone, but the check must not guess
        [b'"\xff"'],  # not UTF-8
    ],
)
def test_json_decode_all_rejects_what_decode_would(raws: list[bytes | None]):
    with pytest.raises(BadRecord):
        JsonCodec().decode_all(raws)
    one_by_one_ok = True
    for raw in raws:
        try:
            JsonCodec().decode(raw)
        except BadRecord:
            one_by_one_ok = False
    # Rejecting a batch is always safe (the caller rechecks record by record);
    # what must never happen is accepting a batch with a bad record in it.
    assert not one_by_one_ok or raws == [b" 1", b"2"]

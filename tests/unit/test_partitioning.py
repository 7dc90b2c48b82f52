from __future__ import annotations

import pytest

from kiq.partitioning import murmur2, partition_for

# Vectors from Kafka's own UtilsTest.testMurmur2 (Java signed ints).
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(data: bytes, expected: int):
    assert murmur2(data) == expected


def test_partition_is_positive_modulo():
    # toPositive(-973932308) == -973932308 & 0x7fffffff == 1173551340
    assert partition_for(b"21", 12) == (1173551340 % 12)
    assert all(0 <= partition_for(f"k{i}", 7) < 7 for i in range(500))


def test_str_keys_are_utf8():
    assert partition_for("東京", 30) == partition_for("東京".encode(), 30)


def test_empty_key_has_a_partition():
    assert 0 <= partition_for(b"", 5) < 5


def test_bad_partition_count():
    with pytest.raises(ValueError, match="positive"):
        partition_for("k", 0)

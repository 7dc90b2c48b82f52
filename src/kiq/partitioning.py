"""Key → partition, exactly as Kafka's Java default partitioner does it.

Kafka's ``BuiltInPartitioner`` maps a keyed record to
``toPositive(murmur2(key_bytes)) % num_partitions``. Spark's Kafka sink uses the
Java client, so it agrees; librdkafka only agrees with
``partitioner=murmur2_random`` (see ``kiq.kafka.config``). Every node computes
ownership with this function, so it must match byte for byte.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | str, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``num_partitions``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    if isinstance(key, str):
        key = key.encode("utf-8")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions

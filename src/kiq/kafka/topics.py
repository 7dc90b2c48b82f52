"""Every topic a cluster holds, with its partitions and records: what `kiq topics list`
shows and what `kiq topics delete` says will be lost."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kiq.errors import KiqError
from kiq.kafka.config import client_config
from kiq.kafka.retry import retried
from kiq.kafka.security import PLAINTEXT, KafkaSecurity


@dataclass(frozen=True)
class TopicInfo:
    """One topic: ``records`` counts what its partitions hold now (end less start
    offsets: a compacted topic's is an upper bound); None when the broker would not say."""

    name: str
    partitions: int
    records: int | None

    @property
    def internal(self) -> bool:
        """Kafka's own (``__consumer_offsets``, ...)."""
        return self.name.startswith("__")


def list_topics(
    bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, timeout_s: float = 10.0
) -> list[TopicInfo]:
    """Every topic on the cluster at ``bootstrap``, by name."""
    admin = AdminClient(client_config(bootstrap, security=security, **{"socket.timeout.ms": 5000}))
    try:
        meta = retried(
            lambda: admin.list_topics(timeout=timeout_s), what="list topics", bootstrap=bootstrap
        )
    except KafkaException as exc:
        raise KiqError(f"Kafka at {bootstrap} did not list its topics: {exc.args[0]}") from exc
    counts = {
        name: len(t.partitions)
        for name, t in meta.topics.items()
        if t.error is None  # one these credentials may not describe: not shown
    }
    held = _records(admin, counts, timeout_s)
    return [TopicInfo(name, counts[name], held.get(name)) for name in sorted(counts)]


def _records(admin: AdminClient, counts: dict[str, int], timeout_s: float) -> dict[str, int]:
    """Records per topic (end less start offsets, summed); topics the broker would not
    give offsets of are left out."""
    parts = [TopicPartition(n, p) for n, count in counts.items() for p in range(count)]
    if not parts:
        return {}
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    ends: dict[str, dict[tuple[str, int], int]] = {}
    for which, spec in (("start", earliest), ("end", latest)):
        found = admin.list_offsets(dict.fromkeys(parts, spec), request_timeout=timeout_s)
        ends[which] = {}
        for tp, future in found.items():
            try:
                ends[which][(tp.topic, tp.partition)] = future.result(timeout_s).offset
            except KafkaException:
                continue
    held: dict[str, int] = {}
    missing: set[str] = set()
    for tp in parts:
        key = (tp.topic, tp.partition)
        if key not in ends["start"] or key not in ends["end"]:
            missing.add(tp.topic)
            continue
        held[tp.topic] = held.get(tp.topic, 0) + max(0, ends["end"][key] - ends["start"][key])
    return {name: n for name, n in held.items() if name not in missing}

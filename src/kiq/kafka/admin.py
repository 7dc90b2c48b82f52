"""Topic administration and broker liveness checks.

Each call connects with the ``security`` it is given (PLAINTEXT when none is).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kiq.errors import ConfigError, KiqError
from kiq.kafka.config import client_config
from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.security import PLAINTEXT, KafkaSecurity


def _admin(bootstrap: str, security: KafkaSecurity, **extra: str | int | float) -> AdminClient:
    conf = client_config(bootstrap, security=security, **{"socket.timeout.ms": 5000, **extra})
    return AdminClient(conf)


def _refused(admin: AdminClient, bootstrap: str, failures_before: int) -> ConfigError | None:
    """The broker's refusal of kiq's credentials, if that is why a request failed.

    librdkafka reports it through the error callback, which runs only when the
    client is polled: a failed request alone says "transport failure".
    """
    admin.poll(0.2)
    if KAFKA_LOG.auth_failures == failures_before:
        return None
    return ConfigError(
        f"Kafka at {bootstrap} refused kiq's credentials ({KAFKA_LOG.last_auth_failure}): "
        "check [kafka] security_protocol, sasl_mechanism, sasl_username and "
        "sasl_password_file (KIQ_KAFKA_...)"
    )


def _reachable(bootstrap: str, timeout_s: float) -> bool:
    """A plain TCP connect to any bootstrap address, to avoid librdkafka's retry noise."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def ping(bootstrap: str, timeout_s: float = 2.0, *, security: KafkaSecurity = PLAINTEXT) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request in time.

    A broker that refuses the credentials raises ``ConfigError`` saying so.
    """
    if not _reachable(bootstrap, timeout_s):
        return False
    failures = KAFKA_LOG.auth_failures
    admin = _admin(bootstrap, security, log_level=0)
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        refused = _refused(admin, bootstrap, failures)
        if refused is not None:
            raise refused from exc
        return False
    return bool(md.brokers)


def broker_count(
    bootstrap: str, timeout_s: float = 10.0, *, security: KafkaSecurity = PLAINTEXT
) -> int:
    """How many brokers the cluster's metadata lists (those alive and registered)."""
    return len(_admin(bootstrap, security).list_topics(timeout=timeout_s).brokers)


def topic_partitions(
    bootstrap: str, topic: str, timeout_s: float = 10.0, *, security: KafkaSecurity = PLAINTEXT
) -> int | None:
    """The partition count of ``topic``, or None when it does not exist."""
    failures = KAFKA_LOG.auth_failures
    admin = _admin(bootstrap, security)
    try:
        md = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as exc:
        raise _refused(admin, bootstrap, failures) or exc from exc
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    return len(meta.partitions)


def replication_for(brokers: int) -> tuple[int, dict[str, str]]:
    """Replication factor and topic settings for a cluster of ``brokers`` live brokers.

    Three copies where there are three brokers or more, two of which must have a
    record before a producer with acks=all (every kiq producer, and the pipelines'
    Kafka sink) hears it is written: one broker may die without losing a record
    or refusing a write. Fewer brokers give fewer copies; one gives one.
    """
    factor = max(1, min(3, brokers))
    return factor, ({"min.insync.replicas": "2"} if factor >= 3 else {})


def create_topics(
    bootstrap: str,
    topics: Mapping[str, int] | Iterable[str],
    *,
    partitions: int = 1,
    replication_factor: int | None = None,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create topics (name → partition count) and wait until every one has leaders.

    An existing topic with the same partition count is fine; a different count is
    an error, since key → partition would change under the data. Without a
    ``replication_factor``, the cluster decides it (``replication_for``).
    """
    wanted = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics, partitions)
    failures = KAFKA_LOG.auth_failures
    admin = _admin(bootstrap, security)
    if replication_factor is None:
        brokers = len(admin.list_topics(timeout=timeout_s).brokers)
        replication_factor, durable = replication_for(brokers)
        config = {**durable, **(config or {})}
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=n,
                replication_factor=replication_factor,
                config=dict(config or {}),
            )
            for name, n in wanted.items()
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                refused = _refused(admin, bootstrap, failures)
                raise refused or KiqError(
                    f"could not create topic {name!r}: {exc.args[0].str()}"
                ) from exc
    deadline = time.monotonic() + timeout_s
    for name, n in wanted.items():
        while True:
            md = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
            if (
                md is not None
                and md.error is None
                and md.partitions
                and all(p.leader >= 0 for p in md.partitions.values())
            ):
                if len(md.partitions) != n:
                    raise KiqError(
                        f"topic {name!r} exists with {len(md.partitions)} partitions, not {n}: "
                        "delete it or ask for its real count"
                    )
                break
            if time.monotonic() > deadline:
                raise KiqError(f"topic {name!r} has no leaders after {timeout_s:.0f}s")
            time.sleep(0.1)


def delete_topics(
    bootstrap: str,
    names: Iterable[str],
    timeout_s: float = 30.0,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Delete topics and wait until the broker no longer lists them."""
    wanted = list(names)
    admin = _admin(bootstrap, security)
    for name, fut in admin.delete_topics(wanted, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KiqError(f"could not delete topic {name!r}: {exc.args[0].str()}") from exc
    deadline = time.monotonic() + timeout_s
    while any(topic_partitions(bootstrap, n, security=security) is not None for n in wanted):
        if time.monotonic() > deadline:
            raise KiqError(f"topics {wanted} still listed {timeout_s:.0f}s after deletion")
        time.sleep(0.1)

"""Topic administration and broker liveness checks.

Each call connects with the ``security`` it is given (PLAINTEXT when none is).

kiq creates only the topics that do not exist (described first), so it runs with a
managed cluster's credentials that may only use topics an administrator made. When
the broker will not let it create one, or will not even say whether one exists
(no DESCRIBE), the error names each topic with its partitions, replication and
settings as a ``kafka-topics.sh --create`` line, and the ``kafka-acls.sh`` line
that lets kiq's user use them.

Every call here but the liveness checks (``ping``, ``broker_count``) retries what
passes on its own (a leader not elected yet, a request timed out) for a while
(``kiq.kafka.retry``).
"""

from __future__ import annotations

import logging
import shlex
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kiq.errors import ConfigError, KiqError, SetupError
from kiq.kafka.config import client_config
from kiq.kafka.logs import KAFKA_LOG
from kiq.kafka.retry import kafka_error, retried, transient
from kiq.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

# What a broker answers when these credentials may not create a topic (an ACL, or a
# managed cluster's creation policy).
_CREATE_REFUSED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
    }
)


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
    """The partition count of ``topic``, or None when it does not exist, or when kiq's
    user may not DESCRIBE it (then ``create_topics`` says what to grant or create)."""
    return retried(
        lambda: _topic_partitions(bootstrap, topic, timeout_s, security),
        what=f"describe topic {topic!r}",
        bootstrap=bootstrap,
    )


def _topic_partitions(
    bootstrap: str, topic: str, timeout_s: float, security: KafkaSecurity
) -> int | None:
    failures = KAFKA_LOG.auth_failures
    admin = _admin(bootstrap, security)
    try:
        md = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as exc:
        raise _refused(admin, bootstrap, failures) or exc from exc
    meta = md.topics.get(topic)
    if meta is not None and meta.error is not None:
        if transient(meta.error):  # a leader not elected yet: not "missing"
            raise KafkaException(meta.error)
        if meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            log.warning(
                "kafka user %s may not DESCRIBE topic %s: taken as missing",
                _principal(security),
                topic,
            )
        return None
    return None if meta is None else len(meta.partitions)


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
    """Create the topics (name → partition count) that do not exist; wait until every one
    has leaders.

    The topics are described first (one metadata request), and only the missing ones
    created: a user who may not create topics runs with topics made for it. One that
    another client creates meanwhile is fine. An existing topic with the same partition
    count is fine; a different count is an error, since key → partition would change
    under the data. Without a ``replication_factor``, the cluster decides it
    (``replication_for``). A broker that refuses to create a topic, or to say whether
    it exists, raises ``SetupError`` with the commands that create it and grant kiq's
    user its ACLs.
    """
    wanted = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics, partitions)
    if not wanted:
        return
    # Asked again whole: only what is still missing is created the second time.
    retried(
        lambda: _create_topics(bootstrap, wanted, replication_factor, config, timeout_s, security),
        what=f"create {_names(wanted)}",
        bootstrap=bootstrap,
    )


def _create_topics(
    bootstrap: str,
    wanted: Mapping[str, int],
    replication_factor: int | None,
    config: Mapping[str, str] | None,
    timeout_s: float,
    security: KafkaSecurity,
) -> None:
    failures = KAFKA_LOG.auth_failures
    admin = _admin(bootstrap, security)
    found, denied = _describe(admin, bootstrap, failures, list(wanted), timeout_s)
    for name, count in found.items():
        _check_count(name, count, wanted[name])
    missing = {name: n for name, n in wanted.items() if name not in found}
    if missing:
        if replication_factor is None:
            brokers = len(admin.list_topics(timeout=timeout_s).brokers)
            replication_factor, durable = replication_for(brokers)
            config = {**durable, **(config or {})}
        specs = [
            _Topic(name, n, replication_factor, dict(config or {})) for name, n in missing.items()
        ]
        creatable = [t for t in specs if t.name not in denied]
        refused = _create(admin, bootstrap, failures, creatable, timeout_s) if creatable else {}
        if refused or denied:
            raise SetupError(_not_allowed(bootstrap, security, specs, refused, denied))
    _wait_for_leaders(admin, wanted, timeout_s)


@dataclass(frozen=True)
class _Topic:
    """A topic kiq would create: what ``kafka-topics.sh --create`` needs to make it so."""

    name: str
    partitions: int
    replication: int
    config: dict[str, str]

    def new_topic(self) -> NewTopic:
        return NewTopic(
            self.name,
            num_partitions=self.partitions,
            replication_factor=self.replication,
            config=self.config,
        )

    def create_command(self, bootstrap: str) -> str:
        words = ["kafka-topics.sh", "--bootstrap-server", bootstrap, "--create"]
        words += ["--topic", self.name, "--partitions", str(self.partitions)]
        words += ["--replication-factor", str(self.replication)]
        for key, value in sorted(self.config.items()):
            words += ["--config", f"{key}={value}"]
        return shlex.join(words)


def _describe(
    admin: AdminClient, bootstrap: str, failures: int, names: list[str], timeout_s: float
) -> tuple[dict[str, int], set[str]]:
    """The partition count of each of ``names`` that exists, and those kiq may not
    DESCRIBE (which Kafka answers alike whether they exist or not)."""
    futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout_s)
    found: dict[str, int] = {}
    denied: set[str] = set()
    for name, fut in futures.items():
        try:
            found[name] = len(fut.result().partitions)
        except KafkaException as exc:
            code = exc.args[0].code()
            if transient(exc.args[0]):
                raise  # asked again by create_topics
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                denied.add(name)
            elif code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise _refused(admin, bootstrap, failures) or KiqError(
                    f"could not describe topic {name!r}: {exc.args[0].str()}"
                ) from exc
    return found, denied


def _create(
    admin: AdminClient, bootstrap: str, failures: int, topics: list[_Topic], timeout_s: float
) -> dict[str, KafkaError]:
    """Create ``topics``; those the broker may not create for these credentials, and why."""
    futures = admin.create_topics(
        [t.new_topic() for t in topics], operation_timeout=timeout_s, request_timeout=timeout_s
    )
    refused: dict[str, KafkaError] = {}
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # another client made it meanwhile
            if error.code() in _CREATE_REFUSED:
                refused[name] = error
                continue
            if transient(error):
                raise  # asked again by create_topics
            raise _refused(admin, bootstrap, failures) or KiqError(
                f"could not create topic {name!r}: {error.str()}"
            ) from exc
    return refused


def _check_count(name: str, count: int, wanted: int) -> None:
    if count != wanted:
        raise KiqError(
            f"topic {name!r} exists with {count} partitions, not {wanted}: delete it with "
            f"`kiq topics delete {name}` (its records are lost), or ask for {count} "
            "partitions where it is set (for `kiq up`: [app] topics)"
        )


def _wait_for_leaders(admin: AdminClient, wanted: Mapping[str, int], timeout_s: float) -> None:
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
                _check_count(name, len(md.partitions), n)
                break
            if time.monotonic() > deadline:
                raise KiqError(f"topic {name!r} has no leaders after {timeout_s:.0f}s")
            time.sleep(0.1)


def _principal(security: KafkaSecurity) -> str:
    """kiq's Kafka principal as ACLs name it; a placeholder where the broker derives it
    (from a client certificate, say)."""
    return f"User:{security.username}" if security.sasl else "User:KIQ_PRINCIPAL"


def _not_allowed(
    bootstrap: str,
    security: KafkaSecurity,
    topics: list[_Topic],
    refused: Mapping[str, KafkaError],
    denied: set[str],
) -> str:
    """What the broker would not do, and the commands that make and grant what kiq needs."""
    principal = _principal(security)
    named = [t for t in topics if t.name in refused or t.name in denied]
    why = []
    if refused:
        first = next(iter(refused.values()))
        why.append(f"create {_names(refused)} ({first.name()}: {first.str()})")
    if denied:
        why.append(f"DESCRIBE {_names(denied)}, so kiq cannot tell whether they exist")
    grant = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--add"]
    grant += ["--allow-principal", principal]
    grant += ["--operation", "Describe", "--operation", "Read", "--operation", "Write"]
    for t in named:
        grant += ["--topic", t.name]
    creates = "".join(f"\n  {t.create_command(bootstrap)}" for t in named)
    return (
        f"Kafka at {bootstrap} does not let kiq's user ({principal}) {'; nor '.join(why)}. "
        "kiq creates only the topics that do not exist: have an administrator create them "
        f"(with the admin's --command-config):{creates}\n"
        "and let kiq's user use them (Describe, plus Read where it reads and Write where it "
        f"writes; docs/security.md, Kafka ACLs, has the least set):\n  {shlex.join(grant)}"
    )


def _names(names: Iterable[str]) -> str:
    """``topic 'a'``, ``topics 'a', 'b'``."""
    quoted = [repr(name) for name in sorted(names)]
    return f"topic{'s' if len(quoted) > 1 else ''} {', '.join(quoted)}"


def delete_topics(
    bootstrap: str,
    names: Iterable[str],
    timeout_s: float = 30.0,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Delete topics and wait until the broker no longer lists them."""
    wanted = list(names)
    retried(
        lambda: _delete_topics(bootstrap, wanted, timeout_s, security),
        what=f"delete {_names(wanted)}",
        bootstrap=bootstrap,
    )


def _delete_topics(
    bootstrap: str, wanted: list[str], timeout_s: float, security: KafkaSecurity
) -> None:
    admin = _admin(bootstrap, security)
    for name, fut in admin.delete_topics(wanted, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is not None and transient(error):
                raise  # asked again by delete_topics
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KiqError(f"could not delete topic {name!r}: {exc.args[0].str()}") from exc
    deadline = time.monotonic() + timeout_s
    while any(topic_partitions(bootstrap, n, security=security) is not None for n in wanted):
        if time.monotonic() > deadline:
            raise KiqError(f"topics {wanted} still listed {timeout_s:.0f}s after deletion")
        time.sleep(0.1)


def end_offsets(
    bootstrap: str, topic: str, *, security: KafkaSecurity = PLAINTEXT, timeout_s: float = 10.0
) -> dict[int, int]:
    """Each partition of ``topic``'s log end offset (the next offset to be written)."""
    return retried(
        lambda: _end_offsets(bootstrap, topic, security, timeout_s),
        what=f"ask the end offsets of topic {topic!r}",
        bootstrap=bootstrap,
    )


def _end_offsets(
    bootstrap: str, topic: str, security: KafkaSecurity, timeout_s: float
) -> dict[int, int]:
    admin = _admin(bootstrap, security)
    partitions = topic_partitions(bootstrap, topic, security=security)
    if partitions is None:
        raise KiqError(f"topic {topic} does not exist")
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    asked = {TopicPartition(topic, p): latest for p in range(partitions)}
    found = admin.list_offsets(asked, request_timeout=timeout_s)
    return {tp.partition: future.result(timeout_s).offset for tp, future in found.items()}

"""Transient Kafka errors, retried with backoff until a deadline, then one clear error.

A broker that has just (re)started answers metadata requests before it knows each
partition's leader, and a cluster moving a leader or a coordinator answers "not the
leader" or "still loading" for a moment: the same request a second later succeeds.
The calls a kiq command makes once (a topic described or created, the catalog read,
offsets asked) go through ``retried``, so such a moment costs a log line, not the
command. The node's serving paths (``kiq.kafka.reader``, ``group``, ``writer``) ride
outages their own way and do not come here.

Each retry logs one line an operator can grep, which is also the waiting command's
line of progress (kiq's CLI logs to the terminal)::

  kafka call retried what="read topic 'kiq-catalog'" error=NOT_LEADER_FOR_PARTITION attempt=1 ...

When the deadline passes, ``KafkaUnavailable`` (a ``KiqError``) says what failed,
against which bootstrap, and what to check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from kiq.errors import KafkaUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_FOR_S = 30.0
"""How long a call is retried by default: longer than a local broker takes to elect
its leaders after a restart, short enough that a broker that is down is told soon."""
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 3.0

# Errors that pass on their own (librdkafka does not flag all of them retriable): a
# leader or controller not known yet or moved, a coordinator loading or moved, a
# request or connection that timed out or dropped, a broker still starting.
TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.NOT_CONTROLLER,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.THROTTLING_QUOTA_EXCEEDED,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError._WAIT_CACHE,
        KafkaError._RESOLVE,
    }
)

# Answers that waiting does not change, even where librdkafka flags them retriable:
# kiq takes a missing topic as missing, and a refusal is the user's to fix.
NEVER_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_ALREADY_EXISTS,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.POLICY_VIOLATION,
    }
)

HINT = (
    "is the broker running? `kiq broker status` says (for a cluster of your own, check "
    "that it answers there); if it has just started, run the command again"
)

_retrying: ContextVar[bool] = ContextVar("kiq_kafka_retrying", default=False)


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries (None for anything else)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def transient(error: KafkaError) -> bool:
    """Whether the same request may succeed if asked again in a moment."""
    code = error.code()
    if code in NEVER_CODES or error.fatal():
        return False
    return code in TRANSIENT_CODES or bool(error.retriable())


def retried(
    call: Callable[[], T],
    *,
    what: str,
    bootstrap: str,
    retry_for_s: float = RETRY_FOR_S,
    level: int = logging.WARNING,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``call()``, asked again with bounded exponential backoff while it raises a
    transient ``KafkaException``, for ``retry_for_s`` in all; any other error at once.

    ``what`` says what the call does ("read topic 'x'"), for the log and the error.
    ``level`` is the retry lines': a background loop that has its own way of telling
    an outage passes a lower one.
    A call made inside another ``retried`` call is not retried itself: the outer one
    asks its whole call again, so deadlines do not multiply. Raises
    ``KafkaUnavailable`` when the deadline passes.
    """
    if _retrying.get():
        return call()
    token = _retrying.set(True)
    try:
        return _retry(call, what, bootstrap, retry_for_s, level, sleep, clock)
    finally:
        _retrying.reset(token)


def _retry(
    call: Callable[[], T],
    what: str,
    bootstrap: str,
    retry_for_s: float,
    level: int,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> T:
    started = clock()
    deadline = started + retry_for_s
    backoff = FIRST_BACKOFF_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is None or not transient(error):
                raise
            left = deadline - clock()
            if left <= 0:
                raise KafkaUnavailable(
                    f"could not {what} on Kafka at {bootstrap}: still {error.name()} "
                    f"({error.str()}) after {clock() - started:.0f}s and {attempt} attempts; "
                    f"{HINT}"
                ) from exc
            pause = min(backoff, left)
            log.log(
                level,
                'kafka call retried what="%s" error=%s attempt=%d retry_in_s=%.1f '
                'bootstrap=%s reason="%s"',
                what,
                error.name(),
                attempt,
                pause,
                bootstrap,
                error.str(),
            )
            sleep(pause)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def explain(exc: BaseException) -> str | None:
    """A ``KafkaException`` that reached the command's top said as one line: what
    failed, the error's name and reason, what to check. None for any other error."""
    error = kafka_error(exc)
    if error is None:
        if isinstance(exc, KafkaException):
            return f"a Kafka request failed: {exc}; {HINT}"
        return None
    return f"a Kafka request failed: {error.name()} ({error.str()}); {HINT}"

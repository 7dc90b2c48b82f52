"""kiq.kafka.retry: which Kafka errors are asked again, for how long, and what is said."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from kiq.errors import KafkaUnavailable, KiqError
from kiq.kafka.retry import explain, retried, transient


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def failing(code: int, times: int, reason: str = "") -> tuple[list[int], Callable[[], str]]:
    """A call that raises ``code`` ``times`` times, then answers "ok"; and its call count."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise KafkaException(KafkaError(code, reason or None))
        return "ok"

    return calls, call


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError.NOT_CONTROLLER,
    ],
)
def test_transient_errors_are_asked_again_until_they_pass(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    calls, call = failing(code, 3, "Failed to get watermark offsets")
    with caplog.at_level(logging.WARNING, logger="kiq.kafka.retry"):
        got = retried(
            call,
            what="read topic 'kiq-catalog'",
            bootstrap="127.0.0.1:9092",
            sleep=clock.sleep,
            clock=clock,
        )
    assert got == "ok"
    assert len(calls) == 4
    assert clock.slept == [0.2, 0.4, 0.8]  # exponential backoff
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3  # one line per retry
    name = KafkaError(code).name()
    assert lines[0].startswith(
        f"kafka call retried what=\"read topic 'kiq-catalog'\" error={name} attempt=1"
    )
    assert "bootstrap=127.0.0.1:9092" in lines[0]
    assert "attempt=3" in lines[2]


def test_the_backoff_is_bounded() -> None:
    clock = Clock()
    _, call = failing(KafkaError._TRANSPORT, 8)
    retried(call, what="x", bootstrap="b", retry_for_s=600, sleep=clock.sleep, clock=clock)
    assert clock.slept == [0.2, 0.4, 0.8, 1.6, 3.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.SASL_AUTHENTICATION_FAILED,
    ],
)
def test_other_errors_are_raised_at_once(code: int) -> None:
    clock = Clock()
    calls, call = failing(code, 1)
    with pytest.raises(KafkaException) as raised:
        retried(call, what="x", bootstrap="b", sleep=clock.sleep, clock=clock)
    assert raised.value.args[0].code() == code
    assert len(calls) == 1 and clock.slept == []


def test_anything_but_a_kafka_error_is_raised_at_once() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise KiqError("topic 'x' exists with 3 partitions, not 6")

    with pytest.raises(KiqError, match="exists with"):
        retried(call, what="x", bootstrap="b", sleep=pytest.fail)
    assert calls == [1]


def test_the_deadline_ends_in_one_clear_kiq_error() -> None:
    clock = Clock()
    calls, call = failing(KafkaError.NOT_LEADER_FOR_PARTITION, 10_000, "not leader")
    with pytest.raises(KafkaUnavailable) as raised:
        retried(
            call,
            what="read topic 'kiq-catalog'",
            bootstrap="127.0.0.1:9092",
            retry_for_s=10,
            sleep=clock.sleep,
            clock=clock,
        )
    assert isinstance(raised.value, KiqError)
    message = str(raised.value)
    assert message.startswith("could not read topic 'kiq-catalog' on Kafka at 127.0.0.1:9092:")
    assert "NOT_LEADER_FOR_PARTITION (not leader)" in message
    assert "`kiq broker status`" in message
    assert clock.now == pytest.approx(10)  # not a sleep past the deadline
    assert len(calls) == 8  # 0.2 + 0.4 + 0.8 + 1.6 + 3 + 3 + 1 (the rest) = 10 s


def test_a_call_inside_a_retried_call_is_not_retried_itself() -> None:
    clock = Clock()
    inner_calls, inner = failing(KafkaError._TRANSPORT, 2)
    outer_calls: list[int] = []

    def outer() -> str:
        outer_calls.append(1)
        return retried(inner, what="inner", bootstrap="b", sleep=pytest.fail)

    assert retried(outer, what="outer", bootstrap="b", sleep=clock.sleep, clock=clock) == "ok"
    assert len(outer_calls) == 3 and len(inner_calls) == 3
    assert clock.slept == [0.2, 0.4]


def test_transient_is_what_passes_on_its_own() -> None:
    assert transient(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert not transient(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    # librdkafka's own retriable flag counts too, but not for a missing topic
    assert transient(KafkaError(KafkaError.INVALID_MSG, retriable=True))
    assert not transient(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, retriable=True))
    assert not transient(KafkaError(KafkaError._TRANSPORT, fatal=True))


def test_an_escaped_kafka_exception_is_explained_in_one_line() -> None:
    exc = KafkaException(
        KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Failed to get watermark offsets")
    )
    said = explain(exc)
    assert said is not None and "\n" not in said
    assert "NOT_LEADER_FOR_PARTITION (Failed to get watermark offsets)" in said
    assert "`kiq broker status`" in said
    assert explain(ValueError("x")) is None

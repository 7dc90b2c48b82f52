"""A Kafka client error that reaches a command's top is one `error:` line, exit code 1."""

from __future__ import annotations

import pytest
import typer
from confluent_kafka import KafkaError, KafkaException

from kiq.cli import context
from kiq.cli.context import run_or_exit


def test_a_kafka_exception_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash() -> None:
        raise KafkaException(
            KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Failed to get watermark offsets")
        )

    monkeypatch.setattr(context.err_console, "width", 400)  # as a wide terminal: unwrapped
    with pytest.raises(typer.Exit) as exited:
        run_or_exit(crash)
    assert exited.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: a Kafka request failed: NOT_LEADER_FOR_PARTITION")
    assert "(Failed to get watermark offsets)" in err and "`kiq broker status`" in err


def test_other_exceptions_still_raise() -> None:
    def crash() -> None:
        raise ValueError("a bug: its traceback is wanted")

    with pytest.raises(ValueError, match="a bug"):
        run_or_exit(crash)

"""What every subcommand shares: the config file path and error reporting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from kiq.errors import KiqError

if TYPE_CHECKING:
    from kiq.kafka import KafkaSecurity

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)


@dataclass(frozen=True)
class CliState:
    config: Path | None

    def config_file(self, given: Path | None) -> Path | None:
        """The subcommand's ``--config``, else the one given before it (``kiq --config F ...``)."""
        return given if given is not None else self.config


# A subcommand's own --config (the application file), as `kiq --config` takes it.
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="the application's TOML file (default: $KIQ_CONFIG, else ./kiq.toml)"
    ),
]


def run_or_exit(fn: Callable[[], T]) -> T:
    """Run ``fn``; a KiqError becomes its message on stderr and exit code 1, no traceback.

    So does a Kafka client error that got past kiq's own handling (``kiq.kafka.retry``
    retries what passes on its own): its name, reason and what to check, on one line.
    """
    try:
        return fn()
    except KiqError as exc:
        _exit_with(str(exc), exc)
    except Exception as exc:
        from kiq.kafka.retry import explain

        said = explain(exc)
        if said is None:
            raise
        _exit_with(said, exc)


def _exit_with(message: str, exc: BaseException) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(1) from exc


def kafka_security(config_file: Path | None) -> KafkaSecurity:
    """``[kafka]`` (flags have none: env and the file), for the command to hand to each
    Kafka client it makes; a bad password file stops the command here, with its name."""
    from kiq import settings
    from kiq.kafka import KafkaSecurity

    kafka = run_or_exit(lambda: settings.load(settings.KafkaSettings, config_file))
    return run_or_exit(lambda: KafkaSecurity.from_settings(kafka))

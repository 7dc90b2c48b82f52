"""`kiq pipeline run TARGET [TARGET ...]`: PySpark Structured Streaming pipelines, in one driver."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from kiq import settings
from kiq.cli.context import CliState, kafka_security, run_or_exit
from kiq.cli.defaults import with_default
from kiq.errors import KiqError

log = logging.getLogger(__name__)

app = typer.Typer(help="Run the Spark pipelines that derive kiq's tables.", no_args_is_help=True)

_TARGETS = (
    "FILE.py:FUNCTION or package.module:FUNCTION (FUNCTION(ctx) starts the queries), "
    "or a shipped pipeline: stocks, wordcount; several run in one Spark driver "
    "[the config file's [app] pipelines]"
)


def _app_pipelines(config: Path | None) -> list[str]:
    """The targets of the application file's ``[app] pipelines`` (a relative file beside it)."""
    from kiq.errors import ConfigError

    found = settings.load(settings.AppSettings, config).pipelines
    if not found:
        raise ConfigError(
            "name the pipelines to run: kiq pipeline run TARGET..., or list them as "
            '[app] pipelines = ["file.py:build"] in the config file (--config)'
        )
    return found


# Where a version comes from, for the message that refuses a bad one.
_VERSION_FROM = "version (--version, env KIQ_PIPELINE_VERSION or [pipeline] version)"


class TriggerMode(StrEnum):
    auto = "auto"
    microbatch = "microbatch"
    realtime = "realtime"


@app.command()
def run(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None, typer.Argument(help=_TARGETS, metavar="[TARGET]...", show_default=False)
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            help=with_default("Kafka bootstrap servers", settings.PipelineSettings, "bootstrap")
        ),
    ] = None,
    master: Annotated[
        str | None,
        typer.Option(help=with_default("Spark master", settings.SparkSettings, "master")),
    ] = None,
    trigger: Annotated[
        TriggerMode | None,
        typer.Option(
            help=with_default(
                "auto (Real-Time Mode where Spark runs the query so, else micro-batches), "
                "realtime (or fail) or microbatch",
                settings.PipelineSettings,
                "trigger",
            )
        ),
    ] = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            help=with_default(
                "checkpoint root: a path, or a URI such as s3a://...",
                settings.SparkSettings,
                "checkpoint_dir",
            )
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            help=with_default(
                "partitions of an input topic that must be created",
                settings.PipelineSettings,
                "partitions",
            )
        ),
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(
            help=with_default("micro-batch interval", settings.PipelineSettings, "interval")
        ),
    ] = None,
    realtime_batch: Annotated[
        str | None,
        typer.Option(
            help=with_default(
                "length of one Real-Time Mode batch", settings.PipelineSettings, "realtime_batch"
            )
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(
            help=with_default(
                "version of the tables to write: v1 the usual topics and checkpoints; another "
                "(v2) writes TOPIC.v2 from checkpoints of its own, beside v1, until `kiq switch`",
                settings.PipelineSettings,
                "version",
            )
        ),
    ] = None,
) -> None:
    """Run pipelines until Ctrl-C; a restart resumes from their checkpoints."""
    state: CliState = ctx.obj
    with _reported("+".join(targets or []) or "pipelines"):
        _run(
            state,
            targets,
            bootstrap,
            master,
            trigger,
            checkpoint,
            partitions,
            interval,
            realtime_batch,
            version,
        )


@contextlib.contextmanager
def _reported(name: str) -> Iterator[None]:
    """A run that ends on an error leaves it in ``KIQ_PIPELINE_ERROR_FILE`` (when given), where
    `kiq up` reads it; the terminal has had it already (``run_or_exit``)."""
    from kiq.runtime.pipeline_errors import ERROR_FILE_ENV, PipelineFailed, PipelineFailure

    where = os.environ.get(ERROR_FILE_ENV)
    if where:
        Path(where).unlink(missing_ok=True)  # an earlier run's
    try:
        yield
    except typer.Exit as exc:
        cause = exc.__cause__
        if exc.exit_code and isinstance(cause, KiqError) and where:
            failure = (
                cause.failure
                if isinstance(cause, PipelineFailed)
                else PipelineFailure(pipeline=name, error=type(cause).__name__, message=str(cause))
            )
            try:
                failure.write(Path(where))
            except OSError as write_error:
                log.warning("error file not written file=%s: %s", where, write_error)
        raise


def _unexpected(fn: Callable[[], None], name: str) -> Callable[[], None]:
    """``fn``, where an error that is no KiqError (kiq's own bug, or Spark's) still ends
    with one message: its traceback goes to the log."""
    from kiq.runtime.pipeline_errors import PipelineFailed, PipelineFailure, brief

    def call() -> None:
        try:
            fn()
        except (KiqError, KeyboardInterrupt):
            raise
        except Exception as exc:
            log.exception("pipeline failed pipeline=%s error=%s", name, type(exc).__name__)
            failure = PipelineFailure(name, type(exc).__name__, brief(str(exc)))
            raise PipelineFailed(failure) from exc

    return call


def _run(
    state: CliState,
    targets: list[str] | None,
    bootstrap: str | None,
    master: str | None,
    trigger: TriggerMode | None,
    checkpoint: str | None,
    partitions: int | None,
    interval: str | None,
    realtime_batch: str | None,
    version: str | None,
) -> None:
    """The run the flags describe: checked, then until a signal or a failure."""
    from kiq.pipelines.kafka_io import StreamOptions
    from kiq.pipelines.runner import run_targets
    from kiq.pipelines.targets import resolve
    from kiq.tables.declared import parse_serve_tables
    from kiq.tables.versions import check_version

    wanted: list[str] = targets or run_or_exit(lambda: _app_pipelines(state.config))
    chosen = [run_or_exit(partial(resolve, t)) for t in dict.fromkeys(wanted)]
    conf = run_or_exit(
        lambda: settings.load(
            settings.PipelineSettings,
            state.config,
            bootstrap=bootstrap,
            trigger=trigger,
            partitions=partitions,
            interval=interval,
            realtime_batch=realtime_batch,
            version=version,
        )
    )
    run_or_exit(partial(check_version, conf.version, _VERSION_FROM))
    spark = run_or_exit(
        lambda: settings.load(
            settings.SparkSettings, state.config, master=master, checkpoint_dir=checkpoint
        )
    )
    opts = StreamOptions(
        bootstrap=conf.bootstrap,
        checkpoint_root=spark.checkpoint_root,
        trigger=conf.trigger,
        interval=conf.interval,
        security=kafka_security(state.config),
        realtime_batch=conf.realtime_batch,
    )
    # ctx.write_table(name, ...) writes the topic the config's [serve] tables give `name`.
    serve = run_or_exit(lambda: settings.load(settings.ServeSettings, state.config))
    served = run_or_exit(lambda: parse_serve_tables(serve.tables)[0])
    topics = {t.name: t.topic for t in served if t.topic is not None}
    app_name = run_or_exit(lambda: settings.load(settings.AppSettings, state.config)).name
    name = "+".join(t.name for t in chosen)
    run_or_exit(
        _unexpected(
            lambda: run_targets(
                chosen, spark, opts, conf.partitions, topics, app=app_name, version=conf.version
            ),
            name,
        )
    )


@app.command()
def package(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Argument(
            help="the application file (default: --config, $KIQ_CONFIG or ./kiq.toml)",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="the directory to write [dist/spark-job-APP]", show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace a directory not empty")] = False,
) -> None:
    """Package the application's pipelines as a job for spark-submit: ./submit.sh --master URL."""
    from kiq.cli.context import console
    from kiq.errors import ConfigError
    from kiq.pipelines.package import build_package, default_directory

    state: CliState = ctx.obj

    def found() -> Path:
        path = settings.config_path(config or state.config)
        if path is None:
            raise ConfigError("name the application file: kiq pipeline package app.toml")
        return path

    where = run_or_exit(found)
    target = out or run_or_exit(lambda: default_directory(where))
    written = run_or_exit(lambda: build_package(where, target, force=force))
    console.print(
        f"packaged application {written.app}: pipelines {', '.join(written.pipelines)}, "
        f"{len(written.jars)} jars, in {written.directory}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"submit it: {written.submit} --master spark://HOST:7077", highlight=False)

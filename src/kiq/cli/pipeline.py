"""`kiq pipeline run stocks|wordcount`: a PySpark Structured Streaming pipeline."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kiq import settings
from kiq.cli.context import CliState, run_or_exit

app = typer.Typer(help="Run the Spark pipelines that derive kiq's tables.", no_args_is_help=True)


class Name(StrEnum):
    stocks = "stocks"
    wordcount = "wordcount"


class TriggerMode(StrEnum):
    microbatch = "microbatch"
    realtime = "realtime"


@app.command()
def run(
    ctx: typer.Context,
    names: Annotated[list[Name], typer.Argument(help="which pipelines (one Spark driver)")],
    bootstrap: Annotated[
        str, typer.Option(envvar="KIQ_BOOTSTRAP", help="Kafka bootstrap servers")
    ] = "127.0.0.1:9092",
    master: Annotated[str | None, typer.Option(help="Spark master [local[*]]")] = None,
    trigger: Annotated[
        TriggerMode,
        typer.Option(help="microbatch, or realtime (stateless queries in Real-Time Mode)"),
    ] = TriggerMode.microbatch,
    checkpoint: Annotated[
        Path | None, typer.Option(help="checkpoint root [.kiq/checkpoints]")
    ] = None,
    partitions: Annotated[
        int, typer.Option(help="partitions of an input topic that must be created")
    ] = 30,
    interval: Annotated[str, typer.Option(help="micro-batch interval")] = "0 seconds",
) -> None:
    """Run pipelines until Ctrl-C; a restart resumes from their checkpoints."""
    from kiq.pipelines.kafka_io import StreamOptions
    from kiq.pipelines.runner import Pipeline, PipelineTopics, run_pipelines
    from kiq.pipelines.stocks import StockTopics, start_stock_pipeline
    from kiq.pipelines.wordcount import start_wordcount_pipeline

    state: CliState = ctx.obj
    spark = run_or_exit(lambda: settings.load(
        settings.SparkSettings, state.config, master=master, checkpoint_dir=checkpoint
    ))  # fmt: skip
    opts = StreamOptions(
        bootstrap=bootstrap, checkpoint_root=str(spark.checkpoint_dir.resolve()),
        trigger=trigger.value, interval=interval,
    )  # fmt: skip
    t = StockTopics()
    known = {
        Name.stocks: Pipeline("stocks", start_stock_pipeline, PipelineTopics(
            t.ticks, partitions, (t.quotes, t.day_stats, t.bars), (t.dead_letters,))),
        Name.wordcount: Pipeline("wordcount", start_wordcount_pipeline, PipelineTopics(
            "words", partitions, ("word-counts",))),
    }  # fmt: skip
    chosen = [known[n] for n in dict.fromkeys(names)]
    run_or_exit(lambda: run_pipelines(chosen, spark, opts))

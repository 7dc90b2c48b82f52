"""`kiq pipeline run stocks|wordcount`: a PySpark Structured Streaming pipeline."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kiq import catalog, settings
from kiq.cli.context import CliState, run_or_exit

app = typer.Typer(help="Run the Spark pipelines that derive kiq's tables.", no_args_is_help=True)


class Name(StrEnum):
    stocks = catalog.STOCKS_PIPELINE
    wordcount = catalog.WORDCOUNT_PIPELINE


class TriggerMode(StrEnum):
    microbatch = "microbatch"
    realtime = "realtime"


@app.command()
def run(
    ctx: typer.Context,
    names: Annotated[list[Name], typer.Argument(help="which pipelines (one Spark driver)")],
    bootstrap: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers [127.0.0.1:9092]")
    ] = None,
    master: Annotated[str | None, typer.Option(help="Spark master [local[*]]")] = None,
    trigger: Annotated[
        TriggerMode | None,
        typer.Option(help="microbatch, or realtime (stateless queries in Real-Time Mode)"),
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="checkpoint root [.kiq/checkpoints]")
    ] = None,
    partitions: Annotated[
        int | None, typer.Option(help="partitions of an input topic that must be created [30]")
    ] = None,
    interval: Annotated[str | None, typer.Option(help="micro-batch interval [0 seconds]")] = None,
) -> None:
    """Run pipelines until Ctrl-C; a restart resumes from their checkpoints."""
    from kiq.pipelines.kafka_io import StreamOptions
    from kiq.pipelines.runner import Pipeline, PipelineTopics, run_pipelines
    from kiq.pipelines.stocks import StockTopics, start_stock_pipeline
    from kiq.pipelines.wordcount import start_wordcount_pipeline

    state: CliState = ctx.obj
    conf = run_or_exit(
        lambda: settings.load(
            settings.PipelineSettings,
            state.config,
            bootstrap=bootstrap,
            trigger=trigger,
            partitions=partitions,
            interval=interval,
        )
    )
    spark = run_or_exit(
        lambda: settings.load(
            settings.SparkSettings, state.config, master=master, checkpoint_dir=checkpoint
        )
    )
    opts = StreamOptions(
        bootstrap=conf.bootstrap,
        checkpoint_root=str(spark.checkpoint_dir.resolve()),
        trigger=conf.trigger,
        interval=conf.interval,
    )
    t = StockTopics()
    stocks = PipelineTopics(
        t.ticks, conf.partitions, (t.quotes, t.day_stats, t.bars), (t.dead_letters,)
    )
    words = PipelineTopics(catalog.WORDS, conf.partitions, (catalog.WORD_COUNTS,))
    known = {
        Name.stocks: Pipeline(catalog.STOCKS_PIPELINE, start_stock_pipeline, stocks),
        Name.wordcount: Pipeline(catalog.WORDCOUNT_PIPELINE, start_wordcount_pipeline, words),
    }
    chosen = [known[n] for n in dict.fromkeys(names)]
    run_or_exit(lambda: run_pipelines(chosen, spark, opts))

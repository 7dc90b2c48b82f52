"""`kiq spark start|stop|status`: a local Spark standalone master and worker."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiq import settings
from kiq.cli.context import CliState, console, run_or_exit
from kiq.cli.defaults import stating, with_default

# The launcher is imported when a spark command runs: `kiq serve` loads this module too.
if TYPE_CHECKING:
    from kiq.runtime.spark_cluster import LocalSparkCluster, SparkClusterStatus

app = typer.Typer(
    help="Run a local Spark standalone cluster (one master, one worker) for pipelines.",
    no_args_is_help=True,
)

Port = Annotated[
    int | None,
    typer.Option(help=with_default("the master's port", settings.SparkClusterSettings, "port")),
]
UiPort = Annotated[
    int | None,
    typer.Option(
        help=with_default(
            "the master's web UI; 0: port + 1", settings.SparkClusterSettings, "ui_port"
        )
    ),
]
Host = Annotated[
    str | None,
    typer.Option(help=with_default("address to bind", settings.SparkClusterSettings, "host")),
]
StartedPort = Annotated[
    int | None, typer.Option("--port", help=stating("the master's port", "as started"))
]
StartedUiPort = Annotated[
    int | None, typer.Option("--ui-port", help=stating("the master's web UI", "as started"))
]
StartedHost = Annotated[
    str | None, typer.Option("--host", help=stating("the master's address", "as started"))
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        help=with_default("pid files, logs, work dirs", settings.SparkClusterSettings, "data_dir")
    ),
]
WorkerCores = Annotated[
    int | None,
    typer.Option(
        help=with_default("cores for executors", settings.SparkClusterSettings, "worker_cores")
    ),
]
WorkerMemory = Annotated[
    str | None,
    typer.Option(
        help=with_default("memory for executors", settings.SparkClusterSettings, "worker_memory")
    ),
]


def _cluster(ctx: typer.Context, **flags: object) -> LocalSparkCluster:
    from kiq.runtime.spark_cluster import LocalSparkCluster

    state: CliState = ctx.obj
    return LocalSparkCluster(
        run_or_exit(lambda: settings.load(settings.SparkClusterSettings, state.config, **flags))
    )


def _started(ctx: typer.Context, **flags: object) -> LocalSparkCluster:
    """The cluster as `start` laid it out in the data directory; flags given override it."""
    from kiq.runtime.spark_cluster import started_layout

    where = _cluster(ctx, data_dir=flags.get("data_dir"))
    recorded: dict[str, object] = dict(started_layout(where.data_dir))
    if flags.get("port") is not None:
        recorded.pop("ui_port", None)  # another master's: its UI is port+1 unless given
    given = {k: v for k, v in flags.items() if v is not None}
    return _cluster(ctx, **{**recorded, **given})


def _print(status: SparkClusterStatus) -> None:
    if status.ready:
        console.print(
            f"spark [green]running[/] master={status.master_url} cores={status.cores} "
            f"ui={status.ui_url} pids={status.master_pid},{status.worker_pid} "
            f"logs={status.log_dir}",
            highlight=False,
        )
    elif status.master_pid or status.worker_pid:
        console.print(
            f"spark [yellow]not ready[/] master={status.master_url} "
            f"master_pid={status.master_pid} worker_pid={status.worker_pid} "
            f"logs={status.log_dir}",
            highlight=False,
        )
    else:
        console.print(f"spark [red]stopped[/] master={status.master_url}", highlight=False)


@app.command()
def start(
    ctx: typer.Context,
    port: Port = None,
    ui_port: UiPort = None,
    host: Host = None,
    data_dir: DataDir = None,
    worker_cores: WorkerCores = None,
    worker_memory: WorkerMemory = None,
) -> None:
    """Start the master and the worker; returns once the worker has registered."""
    cluster = _cluster(
        ctx,
        port=port,
        ui_port=ui_port,
        host=host,
        data_dir=data_dir,
        worker_cores=worker_cores,
        worker_memory=worker_memory,
    )
    with console.status(f"starting Spark on {cluster.master_url} ..."):
        status = run_or_exit(cluster.start)
    _print(status)
    console.print(f"run pipelines on it: kiq pipeline run ... --master {status.master_url}")


@app.command()
def stop(
    ctx: typer.Context,
    port: StartedPort = None,
    host: StartedHost = None,
    data_dir: DataDir = None,
) -> None:
    """Stop the worker (and its executors) and the master. Fine if they are not running.

    Host and ports are those `start` used in --data-dir unless given."""
    cluster = _started(ctx, port=port, host=host, data_dir=data_dir)
    stopped = run_or_exit(cluster.stop)
    console.print("spark stopped" if stopped else "spark was not running")


@app.command()
def status(
    ctx: typer.Context,
    port: StartedPort = None,
    ui_port: StartedUiPort = None,
    host: StartedHost = None,
    data_dir: DataDir = None,
) -> None:
    """Say whether the master runs with a live worker; exit 0 only when it does.

    Host and ports are those `start` used in --data-dir unless given."""
    cluster = _started(ctx, port=port, ui_port=ui_port, host=host, data_dir=data_dir)
    current = run_or_exit(cluster.status)
    _print(current)
    if not current.ready:
        raise typer.Exit(1)

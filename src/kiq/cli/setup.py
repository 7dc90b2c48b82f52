"""`kiq setup [--check]`: fetch kiq's JVM jars and build its partitioner, or say what is there;
`kiq setup --spark-conf`: the settings a Spark session of the user's own needs for them.

Three sets, each a directory of the jar cache: ``kafka`` (the broker), ``spark`` (Spark's
Kafka connector) and ``kiq`` (the composite-key partitioner, compiled from the shipped
source). By default they go where kiq looks for them: ``[broker] jars_dir`` for the broker's,
``[spark] jars_dir`` for the others, both by default the kiq checkout's ``.cache/jars`` or,
outside a checkout, the per-user cache; ``--jars-dir`` puts all three in one place.
"""

from __future__ import annotations

import shlex
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kiq import settings
from kiq.cli.context import CliState, console, err_console, run_or_exit

# The jar cache is imported when `kiq setup` runs: `kiq serve` loads this module too.
if TYPE_CHECKING:
    from kiq.runtime.jars import SetStatus


def _places(state: CliState, jars_dir: Path | None) -> dict[Path, list[str]]:
    """The sets to fill, by the directory each goes to."""
    from kiq.runtime.jars import ALL_SETS, KAFKA

    if jars_dir is not None:
        return {jars_dir.absolute(): list(ALL_SETS)}
    broker = run_or_exit(lambda: settings.load(settings.BrokerSettings, state.config)).jars_dir
    spark = run_or_exit(lambda: settings.load(settings.SparkSettings, state.config)).jars_dir
    places: dict[Path, list[str]] = {}
    for name in ALL_SETS:
        places.setdefault((broker if name == KAFKA else spark).absolute(), []).append(name)
    return places


def _print(status: SetStatus) -> None:
    mark = "[green]✓[/]" if status.ready else "[red]✗[/]"
    console.print(f"{mark} {status.name}: {status.description}", highlight=False)
    console.print(f"    in {status.directory}: {status.detail}", highlight=False, soft_wrap=True)


def _print_spark_conf(state: CliState, jars_dir: Path | None, packages: bool) -> None:
    """What ``kiq.pipelines.session_conf`` gives, as spark-submit's flags, one a line, each
    quoted for a shell only where it needs it (so ``$(...)`` splits it as it should)."""
    from kiq.pipelines.session import needed_conf

    flags: dict[str, Any] = {} if jars_dir is None else {"jars_dir": jars_dir.absolute()}
    found = run_or_exit(lambda: settings.load(settings.SparkSettings, state.config, **flags))
    for key, value in run_or_exit(lambda: needed_conf(found, packages=packages)).items():
        print("--conf", shlex.quote(f"{key}={value}"))


def setup(
    ctx: typer.Context,
    jars_dir: Annotated[
        Path | None,
        typer.Option(
            help="put all three sets here (default: the broker's and spark's jars_dir "
            "settings: the kiq checkout's .cache/jars, else $XDG_CACHE_HOME/kiq/jars)"
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="only report what is there (checksums verified)")
    ] = False,
    repository: Annotated[
        str | None,
        typer.Option(help="a Maven repository (default: $KIQ_MAVEN_REPOSITORY, else Central)"),
    ] = None,
    spark_conf: Annotated[
        bool,
        typer.Option(
            "--spark-conf",
            help="print the settings a Spark session of your own needs for kiq's pipelines, "
            "one `--conf spark.KEY=VALUE` a line: spark-submit $(kiq setup --spark-conf) job.py",
        ),
    ] = False,
    packages: Annotated[
        bool,
        typer.Option(
            "--packages",
            help="with --spark-conf: Spark's Kafka connector as Maven coordinates "
            "(spark.jars.packages), which Spark fetches itself, not the jar cache's jars",
        ),
    ] = False,
) -> None:
    """Fetch kiq's JVM jars, checksums verified, and build its partitioner.

    Exits 0 when all are in place. Outside a kiq checkout, the commands that need the jars
    fetch them too."""
    from kiq.runtime.jars import PARTITIONER, check_jars, ensure_jars

    state: CliState = ctx.obj
    if packages and not spark_conf:
        err_console.print("--packages goes with --spark-conf: kiq setup --spark-conf --packages")
        raise typer.Exit(2)
    if spark_conf:
        _print_spark_conf(state, jars_dir, packages)
        return
    found: list[SetStatus] = []
    for directory, sets in _places(state, jars_dir).items():
        if check:
            found += run_or_exit(partial(check_jars, directory, sets))
        else:
            console.print(f"kiq's JVM jars in {directory}", highlight=False, soft_wrap=True)
            found += run_or_exit(partial(ensure_jars, directory, sets, repository, console))
    for status in found:
        _print(status)
    missing = [s.name for s in found if not s.ready]
    if not missing:
        console.print("[green]all in place[/]", highlight=False)
        return
    if not check and missing == [PARTITIONER]:  # no javac, as said above
        console.print("[green]in place[/] but the partitioner, which only composite keys need")
        return
    again = "kiq setup" + (f" --jars-dir {jars_dir}" if jars_dir is not None else "")
    hint = f"run `{again}` to fetch them" if check else "see the messages above"
    err_console.print(f"[bold red]not in place:[/] {', '.join(missing)}: {hint}", highlight=False)
    raise typer.Exit(1)

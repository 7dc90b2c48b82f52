"""`kiq setup [--check]`: fetch kiq's JVM jars and build its partitioner, or say what is there.

Three sets, each a directory of the jar cache: ``kafka`` (the broker), ``spark`` (Spark's
Kafka connector) and ``kiq`` (the composite-key partitioner, compiled from the shipped
source). By default they go where kiq looks for them: ``[broker] jars_dir`` for the broker's,
``[spark] jars_dir`` for the others, both by default the kiq checkout's ``.cache/jars`` or,
outside a checkout, the per-user cache; ``--jars-dir`` puts all three in one place.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
) -> None:
    """Fetch kiq's JVM jars, checksums verified, and build its partitioner.

    Exits 0 when all are in place. Outside a kiq checkout, the commands that need the jars
    fetch them too."""
    from kiq.runtime.jars import PARTITIONER, check_jars, ensure_jars

    state: CliState = ctx.obj
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

"""`kiq topics list|delete`: the topics on an application's broker, and removing them
(`kiq topics reset TABLE`, a table started over, is kiq.cli.reset's).

A topic that is in the way (``topic 'x' exists with 6 partitions, not 12``, or a table
whose key changed) is deleted here, with a confirmation that names what it holds:
its partitions, its records, and the application table the catalog says it is.
The commands find the broker as `kiq up` does (``[app] bootstrap``, else the
``[broker]`` it runs), unless ``--bootstrap`` names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiq import settings
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.cli.context import CliState, ConfigOption, console, kafka_security, run_or_exit
from kiq.errors import KiqError

if TYPE_CHECKING:
    from kiq.kafka import KafkaSecurity
    from kiq.kafka.topics import TopicInfo

app = typer.Typer(
    help="The topics on the application's broker: list them, delete them, reset a table.",
    no_args_is_help=True,
)

# kiq's own topics, shared by every application on the cluster: deleted only on purpose.
KIQ_TOPICS = {
    CATALOG_TOPIC: "kiq's table catalog: every application's table declarations",
    PROGRESS_TOPIC: "kiq's pipeline progress, of every application",
}

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        help="Kafka bootstrap servers \\[the application's: \\[app] bootstrap, else its "
        "\\[broker] port]"
    ),
]


def resolve_bootstrap(config: Path | None, given: str | None) -> str:
    """The Kafka a topic command talks to: ``given``, else the one `kiq up` uses for the
    application in ``config`` (``[app] bootstrap``, else its local ``[broker]``)."""
    if given:
        return given
    own = settings.load(settings.AppSettings, config)
    return own.bootstrap or settings.load(settings.BrokerSettings, config).bootstrap


@dataclass(frozen=True)
class Cluster:
    """The broker a command talks to, and how: what each subcommand starts from."""

    bootstrap: str
    security: KafkaSecurity

    @classmethod
    def of(cls, ctx: typer.Context, config: Path | None, bootstrap: str | None) -> Cluster:
        state: CliState = ctx.obj
        conf = state.config_file(config)
        found = cls(run_or_exit(lambda: resolve_bootstrap(conf, bootstrap)), kafka_security(conf))
        run_or_exit(found.check_answers)
        return found

    def check_answers(self) -> None:
        from kiq.kafka import ping

        if not ping(self.bootstrap, timeout_s=5.0, security=self.security):
            raise KiqError(
                f"no Kafka broker answers at {self.bootstrap}: start the application "
                "(`kiq up`), or name its broker with --bootstrap"
            )

    def topics(self) -> list[TopicInfo]:
        from kiq.kafka.topics import list_topics

        return list_topics(self.bootstrap, security=self.security)

    def holders(self) -> dict[str, list[str]]:
        """What the catalog says each topic holds: ``table APP/NAME`` (``NAME@VERSION``
        for another version), or its dead letters."""
        from kiq.kafka import compacted
        from kiq.tables.declared import decode_catalog

        records = compacted.read_latest(self.bootstrap, CATALOG_TOPIC, security=self.security)
        found: dict[str, list[str]] = {}
        for declared in decode_catalog(records).values():
            table = f"{declared.app}/{declared.name}"
            found.setdefault(declared.topic, []).append(f"table {table}")
            for topic in declared.dead_letters:
                found.setdefault(topic, []).append(f"dead letters of {table}")
        for topic, what in KIQ_TOPICS.items():
            found.setdefault(topic, []).append(what)
        return {topic: sorted(set(what)) for topic, what in found.items()}


def _records(info: TopicInfo) -> str:
    return "?" if info.records is None else f"{info.records:,}"


@app.command("list")
def list_(
    ctx: typer.Context,
    bootstrap: BootstrapOption = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Kafka's own topics (__consumer_offsets, ...) too")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """The topics on the broker: partitions, records and what each holds."""
    cluster = Cluster.of(ctx, config, bootstrap)
    topics = [t for t in run_or_exit(cluster.topics) if show_all or not t.internal]
    holders = run_or_exit(cluster.holders)
    if not topics:
        console.print(f"no topics on {cluster.bootstrap}", highlight=False)
        return
    rows = [("TOPIC", "PARTITIONS", "RECORDS", "HOLDS")]
    rows += [
        (t.name, str(t.partitions), _records(t), "; ".join(holders.get(t.name, [])) or "-")
        for t in topics
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2])]
        console.print("  ".join([*cells, row[3]]), highlight=False, markup=False, soft_wrap=True)


@app.command()
def delete(
    ctx: typer.Context,
    topics: Annotated[
        list[str],
        typer.Argument(metavar="TOPIC...", help="the topics to delete", show_default=False),
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="delete without asking")] = False,
    internal: Annotated[
        bool,
        typer.Option(
            "--internal",
            help=f"allow kiq's own topics ({CATALOG_TOPIC}, {PROGRESS_TOPIC}) and Kafka's (__...)",
        ),
    ] = False,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Delete topics and every record in them, after a confirmation naming what is lost."""
    names = list(dict.fromkeys(topics))
    guarded = [n for n in names if n in KIQ_TOPICS or n.startswith("__")]
    if guarded and not internal:
        run_or_exit(lambda: _refuse_internal(guarded))
    cluster = Cluster.of(ctx, config, bootstrap)
    found = {t.name: t for t in run_or_exit(cluster.topics)}
    missing = [n for n in names if n not in found]
    if missing:
        run_or_exit(lambda: _no_such(missing, cluster.bootstrap))
    holders = run_or_exit(cluster.holders)
    console.print(f"Deleting from Kafka at {cluster.bootstrap}:", highlight=False)
    for name in names:
        held = holders.get(name)
        what = f" — {'; '.join(held)}" if held else ""
        console.print(
            f"  {name}: {found[name].partitions} partitions, {_records(found[name])} records{what}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if any(h.startswith("table ") for n in names for h in holders.get(n, [])):
        console.print(
            "A table's topic deleted alone comes back with only the rows its pipeline writes "
            "from its checkpoint on; `kiq topics reset TABLE` starts a table over whole.",
            highlight=False,
            markup=False,
        )
    if not yes:
        asked = f"Their records are lost for good. Delete {_count(len(names))}?"
        if not typer.confirm(asked, default=False):
            console.print("nothing deleted")
            raise typer.Exit(1)
    from kiq.kafka import delete_topics

    run_or_exit(lambda: delete_topics(cluster.bootstrap, names, security=cluster.security))
    for name in names:
        console.print(f"deleted topic {name}", highlight=False, markup=False)


def _count(n: int) -> str:
    return "1 topic" if n == 1 else f"{n} topics"


def _refuse_internal(names: list[str]) -> None:
    listed = ", ".join(names)
    raise KiqError(
        f"{listed}: kiq's or Kafka's own (every application on the cluster uses them); "
        "nothing deleted. Add --internal to delete them all the same"
    )


def _no_such(names: list[str], bootstrap: str) -> None:
    raise KiqError(
        f"no topic {', '.join(names)} on {bootstrap}; nothing deleted "
        "(`kiq topics list` shows the topics there)"
    )

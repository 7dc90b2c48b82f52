"""`kiq topics reset TABLE`: start a table over, for a pipeline whose key or shape changed.

A table's topic keeps what its pipeline wrote under the old declaration, and its checkpoint
remembers how far the input was read; so a pipeline whose key changed would serve the old
records beside the new ones (``kiq.tables.compatible`` refuses it at start). A reset, after
a confirmation naming what is lost, removes the four places the old table lives, in order:

1. its declaration in the table catalog (a tombstone): every running node that follows the
   catalog closes the table and deletes its stores, and the next start declares it afresh;
2. its topic, decided as ``kiq retire`` decides (``kiq.tables.retire``): only a topic kiq
   derives for the version and nothing else names or reads; else nothing is changed;
3. its query's checkpoint, ``ROOT/RUN/QUERY``, only when the declaration's checkpoint is
   exactly ``ROOT/RUN`` under a checkpoint root configured here (``kiq.cli.checkpoints``);
4. the stores `kiq up`'s own nodes left under ``[app] home`` (``n1``, ``n2``, ...), for a
   node that is not running (a running one did 1. itself), by ``remove_table_stores``.

Every table the same query writes shares its checkpoint, so they are reset together. The
query's dead letters are kept. While the pipeline version that writes the table runs (its
progress says so), nothing is changed: stop it first.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from kiq import settings
from kiq.catalog import CATALOG_TOPIC, PROGRESS_TOPIC
from kiq.cli.checkpoints import checkpoint_to_drop
from kiq.cli.context import CliState, ConfigOption, console, run_or_exit
from kiq.errors import KiqError
from kiq.tables.declared import Declared, decode_catalog
from kiq.tables.retire import input_topics, retire_topics
from kiq.tables.versions import check_version, internal_name

if TYPE_CHECKING:
    from kiq.cli.topics import Cluster

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A query's name as it becomes a directory (``ctx.write_table``'s name, or ``query=``).
_QUERY = re.compile(r"(?!\.+$)[A-Za-z0-9._-]{1,200}")
_NODE_DIR = re.compile(r"n([0-9]{1,3})")


@dataclass
class ResetPlan:
    """What a reset removes, decided before anything changes."""

    app: str
    version: str
    run: str  # the pipeline version that writes the tables (``stocks``, ``stocks@v2``)
    query: str
    tables: list[Declared]
    topics: list[str]  # to delete (each exists)
    gone: list[str]  # topics already gone
    checkpoint: Path | None  # the query's directory to delete
    checkpoint_note: str
    stores: list[tuple[Path, str]] = field(default_factory=list)  # (node dir, table name)
    running_nodes: list[str] = field(default_factory=list)  # node dirs whose node answers
    kept_letters: list[str] = field(default_factory=list)


def plan_reset(
    table: str,
    version: str,
    app: str,
    catalog: Mapping[str, bytes],
    progress: Mapping[str, bytes],
    existing: set[str],
    roots: Sequence[str],
    home: Path | None,
    node_port: int | None = None,
) -> ResetPlan:
    """Decide a reset of ``table`` ``version`` of ``app``; a ``KiqError`` when it may not be
    done (nothing changed). ``existing``: the topics on the cluster; ``roots``: the
    checkpoint roots configured here; ``home``: `kiq up`'s ``[app] home``, whose node
    directories ``n1``... hold stores (``node_port``: the first node's port)."""
    from kiq.progress import decode_progress

    name = internal_name(table, version)
    declared = decode_catalog(catalog, app=app)
    target = declared.get(name)
    if target is None:
        raise KiqError(
            f"table {name} of application {app} is not in the table catalog: nothing to reset "
            "(`kiq topics list` shows the topics; `kiq topics delete TOPIC` deletes one)"
        )
    run, query = target.run, target.query
    if not target.pipeline or not _QUERY.fullmatch(query):
        raise KiqError(
            f"table {name}: its declaration names no pipeline and query kiq can find the "
            "checkpoint of; nothing was changed"
        )
    together = sorted(
        (d for d in declared.values() if d.run == run and d.query == query),
        key=lambda d: d.name,
    )
    now = int(time.time() * 1000)
    queries = decode_progress(progress, app)
    running = [
        q for q in queries if q.pipeline == run and q.state == "running" and not q.stale(now)
    ]
    if running:
        raise KiqError(
            f"pipeline {run} is running (query {running[0].query}), and writes {name}: stop it "
            "first (Ctrl-C in its terminal, or stop `kiq up`), then reset; nothing was changed"
        )
    inputs = input_topics(msgspec.to_builtins(q) for q in queries)
    topics: list[str] = []
    gone: list[str] = []
    letters: list[str] = []
    for d in together:
        decided = retire_topics(
            key=d.catalog_key,
            topic=d.topic,
            version=d.version,
            dead_letters=d.dead_letters,
            catalog=catalog,
            inputs=inputs,
        )
        kept = {k.topic: k.reason for k in decided.kept}
        if d.topic in kept:
            raise KiqError(
                f"table {d.name}: its topic {d.topic} is not one a reset may delete "
                f"({kept[d.topic]}); nothing was changed"
            )
        (topics if d.topic in existing else gone).append(d.topic)
        letters += [t for t in d.dead_letters if t not in letters]
    checkpoint, note = _checkpoint(target, roots)
    plan = ResetPlan(
        app, version, run, query, together, topics, gone, checkpoint, note, kept_letters=letters
    )
    if home is not None:
        _node_stores(plan, home, node_port)
    return plan


def _checkpoint(target: Declared, roots: Sequence[str]) -> tuple[Path | None, str]:
    """The query's checkpoint directory to delete, and what to say of it; a ``KiqError``
    when it is somewhere this machine may not delete (``kiq.cli.checkpoints``' fences)."""
    run, query = target.run, target.query
    where = target.checkpoint
    for root in roots:
        found = checkpoint_to_drop(where or f"{root}/{run}", root, run, target.version)
        if isinstance(found, Path):
            mine = found / query
            if mine.is_symlink() or not mine.is_dir():
                return None, f"no checkpoint of query {query} in {found}"
            if mine.resolve().parent != found:
                raise KiqError(f"checkpoint {mine} is not inside {found}; nothing was changed")
            return mine, f"checkpoint {mine} (query {query} of pipeline {run})"
    if where and _SCHEME.match(where) and not where.startswith("file:"):
        return None, (
            f"checkpoint {where}/{query} is not on this machine: delete it there before the "
            "pipeline starts again (kiq does not delete remote storage)"
        )
    for root in roots:
        if _SCHEME.match(root):
            continue
        expected = Path(root).resolve() / run
        if not where or Path(where).resolve() == expected:
            return None, f"no checkpoint of {run} on this machine (under {root})"
    raise KiqError(
        f"the pipeline {run} checkpoints in {where}, not under the checkpoint root here "
        f"({', '.join(roots)}): run the reset with --checkpoint ROOT (the root it ran with) "
        "on the machine where it ran; nothing was changed"
    )


def _node_stores(plan: ResetPlan, home: Path, first_port: int | None) -> None:
    """The stores `kiq up`'s nodes keep of the tables under ``home`` (``n1``, ``n2``, ...)."""
    from kiq.stores import table_dir

    if not home.is_dir():
        return
    for node_dir in sorted(home.iterdir()):
        number = _NODE_DIR.fullmatch(node_dir.name)
        if number is None or node_dir.is_symlink() or not node_dir.is_dir():
            continue
        held = [d.name for d in plan.tables if table_dir(node_dir, d.name).is_dir()]
        if not held:
            continue
        if first_port is not None and _answers(first_port + int(number.group(1)) - 1):
            plan.running_nodes.append(node_dir.name)
            continue
        plan.stores += [(node_dir, name) for name in held]


def _answers(port: int) -> bool:
    """Whether something listens on the loopback ``port`` (a running `kiq up` node)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def describe(plan: ResetPlan, records: Mapping[str, int | None]) -> list[str]:
    """The confirmation's lines: what is lost, and what is kept."""
    names = ", ".join(d.name for d in plan.tables)
    lines = [f"Resetting {names} (application {plan.app}, version {plan.version}):"]
    if len(plan.tables) > 1:
        lines.append(f"  (query {plan.query} writes them all: they share its checkpoint)")
    for d in plan.tables:
        lines.append(f"  catalog: the declaration of {d.name} ({d.describe()}) is removed")
    for topic in plan.topics:
        held = records.get(topic)
        count = "?" if held is None else f"{held:,}"
        lines.append(f"  topic {topic}: deleted with its {count} records")
    lines += [f"  topic {topic}: already gone" for topic in plan.gone]
    if plan.checkpoint is not None:
        lines.append(f"  {plan.checkpoint_note}: deleted")
    else:
        lines.append(f"  {plan.checkpoint_note}")
    for node_dir, name in plan.stores:
        lines.append(f"  stores of {name} in {node_dir}: deleted")
    for node in plan.running_nodes:
        lines.append(f"  node {node} is running: it drops the table as it reads the catalog")
    if plan.kept_letters:
        lines.append(f"  kept: the dead letters ({', '.join(plan.kept_letters)})")
    lines.append(
        f"The next start of pipeline {plan.run} declares the table afresh and derives it "
        "again from the start of its input."
    )
    return lines


def apply(plan: ResetPlan, cluster: Cluster) -> list[str]:
    """Carry ``plan`` out, in the module docstring's order; what was done, line by line."""
    from kiq.kafka import compacted, delete_topics
    from kiq.progress import progress_key
    from kiq.stores import remove_table_stores

    done: list[str] = []
    bootstrap, security = cluster.bootstrap, cluster.security
    compacted.put(
        bootstrap, CATALOG_TOPIC, {d.catalog_key: None for d in plan.tables}, security=security
    )
    done += [f"removed the declaration of {d.name}" for d in plan.tables]
    compacted.ensure(bootstrap, PROGRESS_TOPIC, security=security)
    key = progress_key(plan.app, plan.run, plan.query)
    compacted.put(bootstrap, PROGRESS_TOPIC, {key: None}, security=security)
    if plan.topics:
        delete_topics(bootstrap, plan.topics, security=security)
        done += [f"deleted topic {t}" for t in plan.topics]
    if plan.checkpoint is not None:
        shutil.rmtree(plan.checkpoint)  # refuses a symlink itself, never follows one inside
        done.append(f"deleted checkpoint {plan.checkpoint}")
    for node_dir, name in plan.stores:
        if remove_table_stores(node_dir, name):
            done.append(f"deleted the stores of {name} in {node_dir}")
    return done


def reset(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="the table's name", show_default=False)],
    version: Annotated[
        str | None,
        typer.Option(help="the version to reset \\[the \\[pipeline] version, else v1]"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="reset without asking")] = False,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint",
            help="the checkpoint root the pipeline ran with; only ROOT/PIPELINE/QUERY is "
            "deleted \\[the \\[spark] checkpoint_dir, and `kiq up`'s HOME/checkpoints]",
        ),
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            help="Kafka bootstrap servers \\[the application's: \\[app] bootstrap, else its "
            "\\[broker] port]"
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Start a table over (records, checkpoint, declaration, stores), after a confirmation.

    For a pipeline whose table changed its key or shape: the next start declares the table
    afresh and derives it again from the start of its input."""
    from kiq.cli.topics import Cluster

    state: CliState = ctx.obj
    conf = state.config_file(config)
    app = run_or_exit(lambda: settings.load(settings.AppSettings, conf))
    chosen = version or run_or_exit(lambda: settings.load(settings.PipelineSettings, conf)).version
    run_or_exit(lambda: check_version(chosen))
    spark = run_or_exit(
        lambda: settings.load(settings.SparkSettings, conf, checkpoint_dir=checkpoint)
    )
    home = app.home_dir.resolve()
    roots = [spark.checkpoint_root]
    if checkpoint is None and str(home / "checkpoints") not in roots:
        roots.append(str(home / "checkpoints"))
    cluster = Cluster.of(ctx, conf, bootstrap)
    plan, held = run_or_exit(lambda: _decide(cluster, table, chosen, app, roots, home))
    for line in describe(plan, held):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if not yes and not typer.confirm(
        "The table's records are lost for good. Reset it?", default=False
    ):
        console.print("nothing changed")
        raise typer.Exit(1)
    for line in run_or_exit(lambda: apply(plan, cluster)):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"{table} is reset: start pipeline {plan.run} again (kiq up, or kiq pipeline run)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _decide(
    cluster: Cluster,
    table: str,
    version: str,
    app: settings.AppSettings,
    roots: list[str],
    home: Path,
) -> tuple[ResetPlan, dict[str, int | None]]:
    from kiq.kafka import compacted

    bootstrap, security = cluster.bootstrap, cluster.security
    catalog = compacted.read_latest(bootstrap, CATALOG_TOPIC, security=security)
    progress = compacted.read_latest(bootstrap, PROGRESS_TOPIC, security=security)
    found = {t.name: t.records for t in cluster.topics()}
    plan = plan_reset(
        table, version, app.name, catalog, progress, set(found), roots, home, app.port
    )
    return plan, {t: found.get(t) for t in plan.topics}

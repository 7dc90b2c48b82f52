"""`kiq versions`, `kiq switch`, `kiq retire`, `kiq diff`: a table's versions, from a node.

A pipeline run with ``--version v2`` builds a table's next version beside the one serving
(kiq.tables.versions). These commands are how an operator sees the versions, checks that
the new one holds what it should (``diff``), moves the table's name to it (``switch``) and
drops the old one (``retire``). Every one asks a node's HTTP API, as any client would,
so they work from any machine that reaches a node: the node does the cluster's work.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import orjson
import typer
from rich.markup import escape
from rich.table import Table

from kiq import settings
from kiq.cli.checkpoints import drop_checkpoint
from kiq.cli.compare import Diff, Rules, compare
from kiq.cli.context import CliState, ConfigOption, console, err_console
from kiq.cli.tokens import TokenFileOption, TokenOption, bearer_token
from kiq.errors import ConfigError, KiqError
from kiq.security.tls import client_context

if TYPE_CHECKING:
    # Imported when a command runs: `kiq --help` need not load an HTTP client.
    from kiq.http_client import Client, Response, Transport

# How often `kiq diff` asks whether both versions have caught up.
POLL_S = 1.0
REQUEST_TIMEOUT_S = 30.0
# Tests put an httpx.MockTransport here; None: the network.
transport: Transport | None = None

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="a node's URL \\[the config's \\[serve] advertised URL]"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document")]


class NodeError(KiqError):
    """A node could not be reached, or refused: the message is the node's own, and the URL."""


@dataclass
class NodeClient:
    """One node's HTTP API, as these commands use it."""

    url: str
    client: Client

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.client.close()

    def call(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Response:
        from kiq.http_client import HttpError, send

        try:
            response = send(self.client, method, path, params=params, json=body)
        except HttpError as exc:
            if exc.timed_out:
                raise NodeError(
                    f"{self.url} did not answer {method} {path} within {REQUEST_TIMEOUT_S:.0f} s"
                ) from exc
            raise NodeError(
                f"cannot reach {self.url}: {exc.reason}; is a node running "
                "there? Give a node's URL with --url"
            ) from exc
        if response.status_code >= 400:
            raise NodeError(_refusal(self.url, response))
        return response

    def json(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Any:
        response = self.call(method, path, params=params, body=body)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise NodeError(f"{self.url} answered {method} {path} with no JSON") from exc

    def versions(self, table: str) -> dict[str, Any]:
        found: dict[str, Any] = self.json("GET", f"{_path(table)}/versions")
        return found


def _refusal(url: str, response: Response) -> str:
    try:
        body = orjson.loads(response.content)
        message = str(body["message"]) if isinstance(body, dict) else response.text
    except (orjson.JSONDecodeError, KeyError):
        message = response.text.strip()[:200] or response.reason_phrase
    hint = ""
    if response.status_code == 401:
        hint = " (give a token with --token-file FILE or KIQ_TOKEN)"
    elif response.status_code == 403:
        hint = " (switch and retire need a token with the kiq:admin scope)"
    return f"{url}: {message}{hint} [HTTP {response.status_code}]"


def _path(table: str) -> str:
    return f"/v1/tables/{quote(table, safe='')}"


def _node(url: str, token: str | None, config: Path | None) -> NodeClient:
    from kiq.http_client import Verify, sync_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    verify: Verify = True
    if url.startswith("https://"):
        # A cluster with its own CA: the one the nodes verify each other with.
        ca = settings.load(settings.TlsSettings, config).ca
        if ca is not None:
            verify = client_context(ca)
    client = sync_client(
        base_url=url,
        headers=headers,
        timeout=REQUEST_TIMEOUT_S,
        verify=verify,
        transport=transport,
    )
    return NodeClient(url, client)


def _one_node(url: str | None, token: str | None, config: Path | None) -> NodeClient:
    """The node a one-node command asks: ``--url``, else the config's own address."""
    return _node(_urls([url] if url else None, config)[0], token, config)


def _urls(given: list[str] | None, config: Path | None) -> list[str]:
    urls = [u.rstrip("/") for u in given or []]
    if not urls:
        urls = [settings.load(settings.ServeSettings, config).advertised_url]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--url: {url!r} is not an http:// or https:// URL")
    return urls


def _guard(fn: Callable[[], int], failure: int) -> None:
    """Run ``fn`` and exit with its code; a KiqError is one line on stderr and ``failure``."""
    try:
        code = fn()
    except KiqError as exc:
        err_console.print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(failure) from exc
    raise typer.Exit(code)


def _echo_json(doc: Any) -> None:
    typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


# -- kiq versions ----------------------------------------------------------------------------


def versions(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="the table's name")],
    url: UrlOption = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List a table's versions: which one serves, and how far each has got."""
    state: CliState = ctx.obj
    conf = state.config_file(config)

    def run() -> int:
        with _one_node(url, bearer_token(token, token_file), conf) as node:
            found = node.versions(table)
        if as_json:
            _echo_json(found)
            return 0
        console.print(_versions_table(found))
        return 0

    _guard(run, failure=1)


def _versions_table(found: dict[str, Any]) -> Table:
    table = Table(title=f"{found.get('table', '')}: versions", title_justify="left")
    for name, right in (
        ("version", False),
        ("current", False),
        ("topic", False),
        ("keys ~", True),  # the stores' own estimates (RocksDB counts overwrites until compacted)
        ("lag", True),
        ("behind", True),
        ("pipeline", False),
        ("caught up", False),
    ):
        table.add_column(name, justify="right" if right else "left")
    for v in found.get("versions", []):
        table.add_row(
            escape(str(v.get("version"))),
            "*" if v.get("current") else "",
            escape(str(v.get("topic", ""))),
            _count(v.get("keys")),
            _count(v.get("lag")),
            _count(v.get("behind")),
            escape(str(v.get("pipeline_state") or "-")),
            "yes" if v.get("caught_up") else "no",
        )
    return table


# -- kiq switch ------------------------------------------------------------------------------


def switch(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="the table's name")],
    version: Annotated[str, typer.Argument(help="the version its name should mean, e.g. v2")],
    url: UrlOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="switch even if the version has not caught up")
    ] = False,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
    config: ConfigOption = None,
) -> None:
    """Make TABLE mean VERSION on every node (readers asking for no version get it)."""
    state: CliState = ctx.obj
    conf = state.config_file(config)

    def run() -> int:
        with _one_node(url, bearer_token(token, token_file), conf) as node:
            answer = node.json(
                "POST", f"{_path(table)}/switch", body={"version": version, "force": force}
            )
        nodes: dict[str, str] = answer.get("nodes") or {}
        moved = str(answer.get("version", version))
        late = {n: v for n, v in sorted(nodes.items()) if v != moved}
        console.print(
            f"{escape(str(answer.get('table', table)))}: {escape(str(answer.get('previous')))} "
            f"-> {escape(moved)} on {_of(len(nodes) - len(late), len(nodes))} "
            f"in {_ms(answer.get('took_ms'))}",
            soft_wrap=True,
            highlight=False,
        )
        for node_id, said in late.items():
            what = "unreachable" if said == "unreachable" else f"still answers {said}"
            err_console.print(
                f"[yellow]warning:[/] {escape(node_id)} {escape(what)}: it moves when it next "
                f"reads the table catalog (kiq versions {escape(table)} to check)",
                soft_wrap=True,
            )
        return 0

    _guard(run, failure=1)


def _of(done: int, nodes: int) -> str:
    """ "3 nodes", or "2 of 3 nodes" when some did not follow."""
    noun = "node" if nodes == 1 else "nodes"
    return f"{done} {noun}" if done == nodes else f"{done} of {nodes} {noun}"


def _ms(value: Any) -> str:
    return f"{value:,.0f} ms" if isinstance(value, int | float) else "? ms"


# -- kiq retire ------------------------------------------------------------------------------


def retire(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="the table's name")],
    version: Annotated[str, typer.Argument(help="the version to drop (not the current one)")],
    url: UrlOption = None,
    checkpoint_root: Annotated[
        str | None,
        typer.Option(
            "--checkpoint",
            help="the checkpoint root the pipeline ran with; only ROOT/PIPELINE@VERSION "
            "(ROOT/PIPELINE for v1) is deleted \\[the config's \\[spark] checkpoint_dir]",
        ),
    ] = None,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
    config: ConfigOption = None,
) -> None:
    """Drop a version that no longer serves: its topics, its stores, and its checkpoint
    once no table of that pipeline version is left.

    Only the topics kiq derives for the version (TOPIC.VERSION, its dead letters) and that
    nothing else uses are deleted, and only the version's own checkpoint directory under
    the checkpoint root; whatever is kept is named, with the reason."""
    state: CliState = ctx.obj
    conf = state.config_file(config)

    def run() -> int:
        root = settings.load(settings.SparkSettings, conf, checkpoint_dir=checkpoint_root)
        with _one_node(url, bearer_token(token, token_file), conf) as node:
            answer = node.json("POST", f"{_path(table)}/retire", body={"version": version})
        nodes: dict[str, str] = answer.get("nodes") or {}
        late = {n: v for n, v in sorted(nodes.items()) if v != "dropped"}
        console.print(
            f"{escape(str(answer.get('table', table)))}: retired "
            f"{escape(str(answer.get('version', version)))} "
            f"(dropped on {_of(len(nodes) - len(late), len(nodes))})",
            soft_wrap=True,
            highlight=False,
        )
        for node_id, said in late.items():
            err_console.print(
                f"[yellow]warning:[/] {escape(node_id)} is {escape(said)}: it drops the version "
                "when it next reads the table catalog",
                soft_wrap=True,
            )
        for topic in answer.get("topics_deleted") or []:
            console.print(f"  deleted topic {escape(str(topic))}", soft_wrap=True)
        for kept in answer.get("topics_kept") or []:
            what = kept if isinstance(kept, dict) else {}
            console.print(
                f"  kept topic {escape(str(what.get('topic')))}: {escape(str(what.get('reason')))}",
                soft_wrap=True,
                highlight=False,
            )
        checkpoint = answer.get("checkpoint")
        if checkpoint:
            said = answer.get("run")
            done = drop_checkpoint(
                str(checkpoint), root.checkpoint_root, str(said) if said else None, version
            )
            console.print(f"  {escape(done)}", soft_wrap=True, highlight=False)
        elif answer.get("last_of_run"):
            console.print("  no checkpoint was recorded for its pipeline version")
        else:
            console.print(
                "  checkpoint kept: its pipeline version writes other tables (or has none recorded)"
            )
        return 0

    _guard(run, failure=1)


# -- kiq diff --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One version being compared, on the node it is read from."""

    node: NodeClient
    version: str
    label: str


def diff(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="the table's name")],
    old: Annotated[
        str | None, typer.Option("--from", help="version to compare from \\[the current one]")
    ] = None,
    new: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="version to compare to \\[the newest other one; with two --url, the second "
            "node's current]",
        ),
    ] = None,
    url: Annotated[
        list[str] | None,
        typer.Option(
            "--url",
            help="a node's URL; twice: the first for --from, the second for --to "
            "\\[the config's \\[serve] advertised URL]",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(help="a field to leave out, as a dotted path (a.b, items[*].ts); repeatable"),
    ] = None,
    tolerance: Annotated[
        float, typer.Option(min=0, help="numbers at most this far apart are equal")
    ] = 0.0,
    sample: Annotated[
        int, typer.Option(min=0, help="examples shown of each kind (the counts stay exact)")
    ] = 10,
    as_json: JsonOption = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="seconds to wait for both versions to catch up")
    ] = 300.0,
    page: Annotated[int, typer.Option(min=1, max=1000, help="keys per request")] = 500,
    token: TokenOption = None,
    token_file: TokenFileOption = None,
    config: ConfigOption = None,
) -> None:
    """Compare two versions of a table key by key, once both have caught up.

    Exit code 0: equal; 1: different; 2: an error, or a version did not catch up in time.
    """
    state: CliState = ctx.obj
    conf = state.config_file(config)
    rules = Rules(frozenset(ignore or ()), tolerance)

    def run() -> int:
        urls = _urls(url, conf)
        if len(urls) > 2:
            raise ConfigError("--url: give one node, or two (--from's, then --to's)")
        bearer = bearer_token(token, token_file)
        with ExitStack() as stack:
            first = stack.enter_context(_node(urls[0], bearer, conf))
            second = stack.enter_context(_node(urls[1], bearer, conf)) if len(urls) == 2 else None
            left, right = _sides(table, old, new, first, second)
            _wait(table, left, right, timeout)
            found = compare(
                _items(left, table, page),
                _items(right, table, page),
                table=table,
                old=left.label,
                new=right.label,
                rules=rules,
                sample=sample,
            )
        _report(found, as_json)
        return 0 if found.same else 1

    _guard(run, failure=2)


def _report(found: Diff, as_json: bool) -> None:
    if as_json:
        _echo_json(found.to_json())
    else:
        found.render(console)


def _natural(version: str) -> list[Any]:
    """v10 after v9."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", version)]


def _names(listing: dict[str, Any]) -> list[str]:
    return [str(v["version"]) for v in listing.get("versions", [])]


def _sides(
    table: str, old: str | None, new: str | None, first: NodeClient, second: NodeClient | None
) -> tuple[Side, Side]:
    """The two versions to compare, defaults filled in, each checked to exist."""
    mine = first.versions(table)
    theirs = second.versions(table) if second is not None else mine
    old = old or mine.get("current")
    if not old:
        raise ConfigError(f"{table} has no current version on {first.url}: name one with --from")
    if new is None:
        if second is not None:
            new = theirs.get("current")
            if not new:
                raise ConfigError(
                    f"{table} has no current version on {second.url}: name one with --to"
                )
        else:
            others = sorted((v for v in _names(mine) if v != old), key=_natural)
            if not others:
                raise ConfigError(
                    f"{table} has one version, {old}: nothing to compare it with; run the "
                    "pipeline with --version v2 first, or name one with --to"
                )
            new = others[-1]
    for version, listing, node in ((old, mine, first), (new, theirs, second or first)):
        if version not in _names(listing):
            known = ", ".join(_names(listing)) or "none"
            raise ConfigError(f"{table} has no version {version} on {node.url} (it has: {known})")
    if second is None and old == new:
        raise ConfigError(f"--from and --to are both {old}: name two versions")
    two = second is not None
    return (
        Side(first, old, f"{old}@{first.url}" if two else old),
        Side(second or first, new, f"{new}@{second.url}" if second is not None else new),
    )


@dataclass
class _State:
    """A side's last answer in ``GET .../versions``."""

    caught_up: bool = False
    lag: int = 0
    behind: int | None = None
    serving: bool = False
    pipeline: str | None = None

    @property
    def remaining(self) -> int:
        return self.lag + (self.behind or 0)

    def todo(self) -> str:
        if self.caught_up:
            return "caught up"
        return f"{self.remaining:,} to go" if self.serving else "not served everywhere yet"

    def describe(self) -> str:
        unread = f"{self.behind:,}" if self.behind is not None else "unknown"
        said = [
            f"{self.remaining:,} records to go (nodes' lag {self.lag:,}, "
            f"pipeline's unread input {unread})"
        ]
        if not self.serving:
            said.append("not served on every partition")
        if self.pipeline:
            said.append(f"pipeline {self.pipeline}")
        return "; ".join(said)


def _states(table: str, sides: tuple[Side, Side]) -> list[_State]:
    """Each side's state, from one listing per node."""
    listings: dict[str, dict[str, Any]] = {}
    for side in sides:
        if side.node.url not in listings:
            listings[side.node.url] = side.node.versions(table)
    return [_state(side, table, listings[side.node.url]) for side in sides]


def _state(side: Side, table: str, listing: dict[str, Any]) -> _State:
    for v in listing.get("versions", []):
        if v.get("version") == side.version:
            return _State(
                caught_up=bool(v.get("caught_up")),
                lag=int(v.get("lag") or 0),
                behind=None if v.get("behind") is None else int(v["behind"]),
                serving=bool(v.get("serving")),
                pipeline=v.get("pipeline_state"),
            )
    raise NodeError(f"{side.node.url} no longer lists version {side.version} of {table}")


def _wait(table: str, left: Side, right: Side, timeout: float) -> None:
    """Return once both sides are caught up; a NodeError saying who is behind at ``timeout``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + timeout
    sides = (left, right)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[todo]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        tasks = [bar.add_task(s.label, total=1, todo="") for s in sides]
        most = [1, 1]
        said = False
        while True:
            states = _states(table, sides)
            if not said and not err_console.is_terminal and not all(s.caught_up for s in states):
                # No bar into a log or a pipe: one line, so a silent wait is not a hang.
                err_console.print(
                    f"waiting up to {timeout:g} s for both versions of {escape(table)} to catch up",
                    soft_wrap=True,
                )
                said = True
            for i, (side, st) in enumerate(zip(sides, states, strict=True)):
                most[i] = max(most[i], st.remaining)
                bar.update(
                    tasks[i],
                    description=f"{side.label}: {st.pipeline or '-'}",
                    total=most[i],
                    completed=most[i] if st.caught_up else most[i] - st.remaining,
                    todo=st.todo(),
                )
            if all(st.caught_up for st in states):
                return
            if time.monotonic() >= deadline:
                behind = "; ".join(
                    f"{s.label} is behind: {st.describe()}"
                    for s, st in zip(sides, states, strict=True)
                    if not st.caught_up
                )
                raise NodeError(
                    f"{table}: not caught up after {timeout:g} s: {behind}. "
                    "Wait longer (--timeout), or see kiq versions"
                )
            time.sleep(POLL_S)


def _items(side: Side, table: str, limit: int) -> Iterator[tuple[str, Any]]:
    """The version's items in key order, one page in memory at a time."""
    cursor: str | None = None
    while True:
        params = {"version": side.version, "limit": str(limit)}
        if cursor:
            params["cursor"] = cursor
        response = side.node.call("GET", f"{_path(table)}/range", params=params)
        served = response.headers.get("x-kiq-version")
        if served is not None and served != side.version:
            raise NodeError(
                f"{side.node.url} answered with version {served} when asked for "
                f"{side.version}: is every node a kiq that knows versions?"
            )
        try:
            body = orjson.loads(response.content)
            items = [(str(item["key"]), item["value"]) for item in body["items"]]
            cursor = body.get("next_cursor")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise NodeError(f"{side.node.url}: a range page kiq cannot read ({exc})") from exc
        yield from items
        if not cursor:
            return

"""`kiq broker start|stop|status`: the local KRaft broker, or a local cluster of several."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kiq import settings
from kiq.cli.context import CliState, console, run_or_exit
from kiq.cli.defaults import stating, with_default

# The launcher is imported when a broker command runs: `kiq serve` loads this module too.
if TYPE_CHECKING:
    from kiq.runtime.broker import BrokerStatus, LocalBroker

app = typer.Typer(
    help="Run a local Kafka broker (KRaft), or a cluster of several, for development.",
    no_args_is_help=True,
)

Port = Annotated[
    int | None, typer.Option(help=with_default("client port", settings.BrokerSettings, "port"))
]
ControllerPort = Annotated[
    int | None,
    typer.Option(
        help=with_default(
            "KRaft controller port; 0: port + brokers", settings.BrokerSettings, "controller_port"
        )
    ),
]
Host = Annotated[
    str | None,
    typer.Option(help=with_default("address to listen on", settings.BrokerSettings, "host")),
]
DataDir = Annotated[
    Path | None, typer.Option(help=with_default("broker data", settings.BrokerSettings, "data_dir"))
]
LogDir = Annotated[
    Path | None, typer.Option(help=with_default("broker logs", settings.BrokerSettings, "log_dir"))
]
Sasl = Annotated[
    bool | None,
    typer.Option("--sasl", help="a SASL_PLAINTEXT (PLAIN) client port, for development"),
]
SaslUsername = Annotated[
    str | None,
    typer.Option(help=with_default("the SASL user", settings.BrokerSettings, "sasl_username")),
]
SaslPasswordFile = Annotated[
    Path | None, typer.Option(help=stating("its password", "one made in DATA_DIR/sasl/password"))
]
SaslUser = Annotated[
    list[str] | None,
    typer.Option(
        "--sasl-user",
        help="another SASL user, NAME or NAME=PASSWORD_FILE (repeat); "
        "the password of a NAME alone: one made in DATA_DIR/sasl/NAME.password",
    ),
]
Acl = Annotated[
    bool | None,
    typer.Option(
        "--acl",
        help="with --sasl: Kafka's StandardAuthorizer; the --sasl-username user is the super "
        "user, the --sasl-user users may do only what ACLs allow",
    ),
]
Brokers = Annotated[
    int | None,
    typer.Option(
        help=with_default(
            "brokers of a local cluster, on ports port, port+1, ...",
            settings.BrokerSettings,
            "brokers",
        )
    ),
]
StartedBrokers = Annotated[
    int | None, typer.Option(help=stating("brokers of the local cluster", "as started"))
]


def _broker(ctx: typer.Context, **flags: object) -> LocalBroker:
    from kiq.runtime.broker import LocalBroker

    state: CliState = ctx.obj
    return LocalBroker(
        run_or_exit(lambda: settings.load(settings.BrokerSettings, state.config, **flags))
    )


def _started(ctx: typer.Context, brokers: int | None, **flags: object) -> LocalBroker:
    """The brokers as `start` laid them out, unless ``--brokers`` says how many."""
    from kiq.runtime.broker import started_brokers

    broker = _broker(ctx, brokers=brokers, **flags)
    if brokers is None and broker.settings.brokers == 1:
        found = started_brokers(broker.data_dir)
        if found > 1:
            return _broker(ctx, brokers=found, **flags)
    return broker


def _print(status: BrokerStatus) -> None:
    if len(status.pids) > 1:
        pids = ",".join(str(p or "-") for p in status.pids)
        state = (
            "[green]running[/]" if status.running and status.answering else "[yellow]partly up[/]"
        )
        if not any(status.pids):
            state = "[red]stopped[/]"
        console.print(
            f"brokers {state} pids={pids} registered={status.registered} "
            f"bootstrap={status.bootstrap} log={status.log_file}",
            highlight=False,
        )
    elif status.running and status.answering:
        console.print(
            f"broker [green]running[/] pid={status.pid} bootstrap={status.bootstrap} "
            f"log={status.log_file}",
            highlight=False,
        )
    elif status.running:
        console.print(
            f"broker [yellow]not answering[/] pid={status.pid} "
            f"bootstrap={status.bootstrap} log={status.log_file}",
            highlight=False,
        )
    else:
        console.print(f"broker [red]stopped[/] bootstrap={status.bootstrap}", highlight=False)


@app.command()
def start(
    ctx: typer.Context,
    port: Port = None,
    controller_port: ControllerPort = None,
    host: Host = None,
    data_dir: DataDir = None,
    log_dir: LogDir = None,
    sasl: Sasl = None,
    sasl_username: SaslUsername = None,
    sasl_password_file: SaslPasswordFile = None,
    sasl_user: SaslUser = None,
    acl: Acl = None,
    brokers: Brokers = None,
) -> None:
    """Start the broker(s) (formats storage on first start); returns once all answer."""
    broker = _broker(
        ctx,
        brokers=brokers,
        port=port,
        controller_port=controller_port,
        host=host,
        data_dir=data_dir,
        log_dir=log_dir,
        sasl=sasl,
        sasl_username=sasl_username,
        sasl_password_file=sasl_password_file,
        sasl_users=sasl_user or None,
        acl=acl,
    )
    with console.status(f"starting the broker on {broker.bootstrap} ..."):
        status = run_or_exit(broker.start)
    _print(status)
    if broker.settings.sasl:
        _print_users(broker)


def _print_users(broker: LocalBroker) -> None:
    """Each SASL user, its password file and the settings that point kiq at it as that user."""
    admin = broker.settings.sasl_username
    users = {admin: broker.password_file, **broker.users}
    role = " (the super user)" if broker.settings.acl else ""
    console.print("SASL_PLAINTEXT, mechanism PLAIN; point kiq at it with", highlight=False)
    for name, path in users.items():
        console.print(
            f"  {name}{role if name == admin else ''}: "
            f"KIQ_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT KIQ_KAFKA_SASL_USERNAME={name} "
            f"KIQ_KAFKA_SASL_PASSWORD_FILE={path}",
            highlight=False,
            soft_wrap=True,  # one line to copy
        )
    if broker.settings.acl:
        console.print(
            f"ACLs: {', '.join(broker.users) or 'other users'} may do only what ACLs grant "
            "(docs/security.md, Kafka ACLs); grant them as the super user, e.g. "
            f"kafka-acls.sh --bootstrap-server {broker.bootstrap} "
            f"--command-config {broker.admin_properties} --add ...",
            highlight=False,
        )


@app.command()
def stop(
    ctx: typer.Context,
    port: Port = None,
    controller_port: ControllerPort = None,
    host: Host = None,
    data_dir: DataDir = None,
    log_dir: LogDir = None,
    brokers: StartedBrokers = None,
) -> None:
    """Stop the broker cleanly (SIGTERM, SIGKILL after 30 s). Fine if it is not running."""
    broker = _started(
        ctx,
        brokers,
        port=port,
        controller_port=controller_port,
        host=host,
        data_dir=data_dir,
        log_dir=log_dir,
    )
    stopped = run_or_exit(broker.stop)
    console.print("broker stopped" if stopped else "broker was not running")


@app.command()
def status(
    ctx: typer.Context,
    port: Port = None,
    controller_port: ControllerPort = None,
    host: Host = None,
    data_dir: DataDir = None,
    log_dir: LogDir = None,
    sasl: Sasl = None,
    sasl_username: SaslUsername = None,
    sasl_password_file: SaslPasswordFile = None,
    brokers: StartedBrokers = None,
) -> None:
    """Say whether the broker runs and answers; exit 0 only when it does."""
    broker = _started(
        ctx,
        brokers,
        port=port,
        controller_port=controller_port,
        host=host,
        data_dir=data_dir,
        log_dir=log_dir,
        sasl=sasl,
        sasl_username=sasl_username,
        sasl_password_file=sasl_password_file,
    )
    current = run_or_exit(broker.status)
    _print(current)
    if not (current.running and current.answering):
        raise typer.Exit(1)

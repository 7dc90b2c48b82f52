"""A local Kafka cluster in KRaft mode: one combined broker + controller, or several.

One broker (the default) lays out under ``data_dir``: ``server.properties``,
``log4j2.properties``, ``broker.pid`` and ``kraft/`` (Kafka's ``log.dirs``); its own
log goes to ``log_dir/server.log``, its stdout and stderr to ``log_dir/broker.out``.
With ``brokers`` > 1 each broker has that layout in ``data_dir/node-N`` and
``log_dir/node-N``, and all are controllers of one static quorum: with three, any one
can die (even the active controller) and the other two go on. Combined nodes: three
JVMs where separate controllers would make four, on a machine of few cores.
Start and stop are idempotent; ``start`` returns once every broker is registered.

With ``sasl`` the client port is a SASL_PLAINTEXT listener (mechanism PLAIN), for
developing and testing kiq's Kafka security. Its user (``sasl_username``) has the
password ``sasl_password_file``, else one made at first start in
``data_dir/sasl/password``; each of ``sasl_users`` has its file, or one made in
``data_dir/sasl/NAME.password``. With ``acl`` as well, Kafka's StandardAuthorizer
decides: ``sasl_username`` is the one super user (the brokers and controllers speak
as it, the controller port taking SASL too), and every other user may do only what
an ACL grants (``allow.everyone.if.no.acl.found=false``), as on a managed cluster.
``data_dir/sasl/admin.properties`` then holds the super user's client settings, for
Kafka's own tools (``kafka-acls.sh --command-config``).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kiq.errors import BrokerError
from kiq.kafka import broker_count, ping
from kiq.kafka.security import KafkaSecurity, spark_options
from kiq.runtime import processes
from kiq.runtime.jars import kafka_broker_classpath
from kiq.runtime.java import java_executable
from kiq.settings import BrokerSettings

log = logging.getLogger(__name__)

_MAIN = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


@dataclass(frozen=True)
class BrokerStatus:
    """What `kiq broker status` reports; ``running`` means every broker's process is alive."""

    running: bool
    answering: bool
    pid: int | None
    bootstrap: str
    log_file: Path
    pids: tuple[int | None, ...] = ()  # one per broker, None for one that is down
    registered: int = 0  # brokers the cluster's metadata lists


class _Node:
    """One broker process: its ports, directories, pid file and configuration."""

    def __init__(self, settings: BrokerSettings, index: int, root: Path, logs: Path) -> None:
        self.node_id = index + 1
        self.host = settings.host
        self.port = settings.port + index
        self.controller_port = settings.effective_controller_port + index
        self.data_dir = root
        self.log_dir = logs
        self.kraft_dir = root / "kraft"
        self.pid_file = root / "broker.pid"
        self.properties = root / "server.properties"
        self.log_file = logs / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def running_pid(self) -> int | None:
        """The pid from the pid file if that process is alive and is this broker."""
        pid = processes.read_pid(self.pid_file)
        if pid is None or not processes.alive(pid, self.proc):
            return None
        return pid if processes.runs_with(pid, _MAIN, str(self.properties)) else None

    def check_ports_free(self) -> None:
        """Before this broker starts: its ports free, or an error saying what holds them
        (another kiq broker, named by its data directory: another application's)."""
        for port, what, name in (
            (self.port, "broker", "port"),
            (self.controller_port, "controller", "controller_port"),
        ):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.host, port))
                except OSError as exc:
                    raise BrokerError(self._taken(what, name, port, exc)) from exc

    def _taken(self, what: str, name: str, port: int, exc: OSError) -> str:
        flag = (
            f"[broker] {name} (KIQ_BROKER_{name.upper()}; "
            f"`kiq broker start --{name.replace('_', '-')}`)"
        )
        holder = broker_holding(port)
        if holder is None or holder == self.data_dir:
            return (
                f"the {what} port {self.host}:{port} is taken ({exc.strerror}): "
                f"stop what holds it or choose another port with {flag}"
            )
        return (
            f"the {what} port {self.host}:{port} is taken by another kiq broker, whose data "
            f"is in {holder} (another application's, or `kiq broker start`'s); this one's "
            f"is {self.data_dir}. Stop that broker (`kiq broker stop --data-dir {holder}`) "
            f"or give this one another port with {flag}"
            + (
                f'; or have `kiq up` use that broker: [app] bootstrap = "{self.address}"'
                if what == "broker"
                else ""
            )
        )

    def cluster_id(self) -> str | None:
        """The cluster id this node's storage was formatted with, if it was."""
        meta = self.kraft_dir / "meta.properties"
        if not meta.exists():
            return None
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
        return None

    def write_config(
        self,
        settings: BrokerSettings,
        voters: str | None,
        sasl: KafkaSecurity | None = None,
        users: Mapping[str, str] | None = None,
    ) -> None:
        """``voters`` is the static quorum of several brokers; None: a quorum of this one.
        ``sasl``: the client listener's PLAIN user the brokers speak as; ``users``: the
        other PLAIN users (name → password)."""
        self.kraft_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        host, port, cport = self.host, self.port, self.controller_port
        replicas = min(3, settings.brokers)
        min_isr = 2 if replicas >= 3 else 1
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.kraft_dir),
            "num.partitions": "1",
            # kiq creates every topic with its partition count; a typo must fail loudly.
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "group.initial.rebalance.delay.ms": "0",
            # Lets tests and the demo use short session timeouts (faster failover).
            "group.min.session.timeout.ms": "1000",
        }
        if voters is None:
            props["controller.quorum.bootstrap.servers"] = f"{host}:{cport}"
        else:
            # Kafka's own broker session (9 s): until a killed broker is fenced, writes with
            # acks=all to the partitions it followed wait for it. A shorter one fenced
            # healthy brokers whose heartbeats a loaded 2-core machine delayed.
            props["controller.quorum.voters"] = voters
        if sasl is not None:
            props.update(self._sasl_properties(sasl, users or {}))
            if settings.acl:
                props.update(self._acl_properties(sasl))
        self.properties.write_text(_properties(props))
        if sasl is not None:
            self.properties.chmod(0o600)  # it holds the password
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log_dir=self.log_dir))

    def _sasl_properties(self, user: KafkaSecurity, users: Mapping[str, str]) -> dict[str, str]:
        """The client listener as SASL_PLAINTEXT with PLAIN; brokers talk to each other on it."""
        host, port, cport = self.host, self.port, self.controller_port
        accounts = {user.username: user.password, **users}
        login = (
            f'{_PLAIN_LOGIN} username="{_jaas(user.username)}" '
            f'password="{_jaas(user.password)}" '
            + " ".join(f'user_{name}="{_jaas(pw)}"' for name, pw in accounts.items())
            + ";"
        )
        listeners = f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}"
        return {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": login,
        }

    @staticmethod
    def _acl_properties(admin: KafkaSecurity) -> dict[str, str]:
        """KRaft's StandardAuthorizer, ``admin`` its one super user; the controller port
        takes SASL (PLAIN) too, so that nobody is a super user by being anonymous there."""
        login = (
            f'{_PLAIN_LOGIN} username="{_jaas(admin.username)}" '
            f'password="{_jaas(admin.password)}" '
            f'user_{admin.username}="{_jaas(admin.password)}";'
        )
        return {
            "listener.security.protocol.map": (
                "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": login,
            "authorizer.class.name": _AUTHORIZER,
            "super.users": f"User:{admin.username}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format(self, java: Path, classpath: str, cluster_id: str, standalone: bool) -> None:
        if (self.kraft_dir / "meta.properties").exists():
            return
        cmd = [str(java), "-Xmx256m", "-cp", classpath, *self._logging_flags()]
        cmd += [_STORAGE_TOOL, "format", "--ignore-formatted"]
        cmd += ["--standalone"] if standalone else []
        cmd += [f"--cluster-id={cluster_id}", "-c", str(self.properties)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise BrokerError(
                f"formatting the broker storage in {self.kraft_dir} failed "
                f"(exit {out.returncode}):\n{(out.stderr or out.stdout).strip()[-2000:]}\n"
                f"remove {self.data_dir} to start from scratch"
            )
        log.info("broker storage formatted dir=%s", self.kraft_dir)

    def _logging_flags(self) -> list[str]:
        return [
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.log_dir}",
        ]

    def launch(self, java: Path, classpath: str, heap: str) -> int:
        cmd = [str(java), f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC"]
        cmd += ["-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]
        cmd += [*self._logging_flags(), "-cp", classpath, _MAIN, str(self.properties)]
        self.proc = processes.spawn(cmd, log_file=self.log_dir / "broker.out", new_session=True)
        self.pid_file.write_text(f"{self.proc.pid}\n")
        log.info("broker %d starting pid=%d log=%s", self.node_id, self.proc.pid, self.log_file)
        return self.proc.pid

    def log_tail(self) -> str:
        return processes.log_tail([self.log_dir / "broker.out", self.log_file])


class LocalBroker:
    """Starts, stops and inspects the local broker(s) described by ``BrokerSettings``."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.log_dir = settings.log_dir.resolve()
        if settings.brokers == 1:
            self.nodes = [_Node(settings, 0, self.data_dir, self.log_dir)]
        else:
            self.nodes = [
                _Node(settings, i, self.data_dir / f"node-{i + 1}", self.log_dir / f"node-{i + 1}")
                for i in range(settings.brokers)
            ]
        self.log_file = self.nodes[0].log_file

    @classmethod
    def on_free_ports(
        cls,
        root: Path,
        brokers: int = 1,
        start_timeout_s: float = 60.0,
        sasl: bool = False,
        *,
        acl: bool = False,
        users: tuple[str, ...] = (),
    ) -> LocalBroker:
        """Brokers for tests and benchmarks: free loopback ports, everything under ``root``.

        With several, the free ports found need not be consecutive, so each
        broker's pair is set after the settings' own.
        """
        from kiq.runtime.ports import free_ports

        ports = free_ports(2 * brokers)
        local = cls(
            BrokerSettings(
                port=ports[0],
                controller_port=ports[1],
                brokers=brokers,
                start_timeout_s=start_timeout_s,
                data_dir=root / "data",
                log_dir=root / "logs",
                sasl=sasl or acl or bool(users),
                sasl_users=list(users),
                acl=acl,
            )
        )
        for node, i in zip(local.nodes, range(0, 2 * brokers, 2), strict=True):
            node.port, node.controller_port = ports[i], ports[i + 1]
        return local

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def password_file(self) -> Path:
        """The SASL user's password (only with ``sasl``)."""
        given = self.settings.sasl_password_file
        return given.resolve() if given is not None else self.data_dir / "sasl" / "password"

    @property
    def users(self) -> dict[str, Path]:
        """The other SASL users (``sasl_users``), each with its password file."""
        return {name: path for name, (path, _) in self._users().items()}

    def _users(self) -> dict[str, tuple[Path, bool]]:
        """Each of ``sasl_users``: its password file, and whether kiq makes it."""
        users = {}
        for entry in self.settings.sasl_users:
            name, _, given = entry.partition("=")
            made = self.data_dir / "sasl" / f"{name}.password"
            users[name] = (Path(given).resolve(), False) if given else (made, True)
        return users

    @property
    def admin_properties(self) -> Path:
        """The super user's client settings for Kafka's own tools (written with ``acl``)."""
        return self.data_dir / "sasl" / "admin.properties"

    @property
    def security(self) -> KafkaSecurity:
        """What a client of these brokers authenticates with (PLAINTEXT without ``sasl``);
        with ``acl``, the super user."""
        if not self.settings.sasl:
            return KafkaSecurity()
        given = self.settings.sasl_password_file is not None
        password = _password(self.password_file, made=not given)
        return KafkaSecurity("SASL_PLAINTEXT", "PLAIN", self.settings.sasl_username, password)

    def security_of(self, user: str) -> KafkaSecurity:
        """What one of ``sasl_users`` authenticates with."""
        found = self._users().get(user)
        if found is None:
            raise BrokerError(f"the broker has no SASL user {user!r} (--sasl-user {user})")
        path, made = found
        return KafkaSecurity("SASL_PLAINTEXT", "PLAIN", user, _password(path, made=made))

    def _user_passwords(self) -> dict[str, str]:
        return {name: self.security_of(name).password for name in self.users}

    def _write_admin_properties(self, admin: KafkaSecurity) -> None:
        options = spark_options(admin)  # the Java client's properties, "kafka."-prefixed
        path = self.admin_properties
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(_properties({k.removeprefix("kafka."): v for k, v in options.items()}))

    def status(self) -> BrokerStatus:
        pids = tuple(n.running_pid() for n in self.nodes)
        up = [n.address for n, pid in zip(self.nodes, pids, strict=True) if pid is not None]
        answering = bool(up) and ping(",".join(up), timeout_s=2.0, security=self.security)
        return BrokerStatus(
            running=all(p is not None for p in pids),
            answering=answering,
            pid=pids[0],
            bootstrap=self.bootstrap,
            log_file=self.log_file,
            pids=pids,
            registered=(
                broker_count(",".join(up), timeout_s=2.0, security=self.security)
                if answering and len(self.nodes) > 1
                else int(answering)
            ),
        )

    def start(self) -> BrokerStatus:
        """Start every broker that does not run; return once all are registered."""
        down = [n for n in self.nodes if n.running_pid() is None]
        if down:
            for node in down:
                node.check_ports_free()
            classpath = kafka_broker_classpath(self.settings.jars_dir)
            java = java_executable()
            voters = None
            if len(self.nodes) > 1:
                voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)
            cluster_id = next((c for n in self.nodes if (c := n.cluster_id())), _cluster_id())
            sasl = self.security if self.settings.sasl else None
            users = self._user_passwords()
            if sasl is not None and self.settings.acl:
                self._write_admin_properties(sasl)
            for node in down:
                node.write_config(self.settings, voters, sasl, users)
                node.format(java, classpath, cluster_id, standalone=voters is None)
            for node in down:
                node.launch(java, classpath, self.settings.heap)
            log.info("brokers starting bootstrap=%s log=%s", self.bootstrap, self.log_file)
        self._wait_registered()
        return self.status()

    def kill(self, index: int) -> int:
        """SIGKILL broker ``index`` (from 0), as a crashed machine; ``start`` brings it back."""
        node = self.nodes[index]
        pid = node.running_pid()
        if pid is None:
            raise BrokerError(f"broker {node.node_id} is not running")
        processes.stop(processes.child_or_pid(pid, node.proc), signal=signal.SIGKILL, grace_s=30)
        node.pid_file.unlink(missing_ok=True)
        log.info("broker %d killed pid=%d", node.node_id, pid)
        return pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop every broker (SIGTERM, then SIGKILL after ``timeout_s``); False if none ran."""
        running = [(n, pid) for n in self.nodes if (pid := n.running_pid()) is not None]
        # all at once: a quorum shuts down together
        targets = [processes.child_or_pid(pid, node.proc) for node, pid in running]
        killed = processes.stop_all(targets, grace_s=timeout_s)
        for (node, pid), was_killed in zip(running, killed, strict=True):
            if was_killed:
                log.warning("broker pid=%d ignored SIGTERM for %.0fs; killed it", pid, timeout_s)
            log.info("broker %d stopped pid=%d", node.node_id, pid)
        for node in self.nodes:
            node.pid_file.unlink(missing_ok=True)
            node.proc = None
        return bool(running)

    def _wait_registered(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                pid = processes.read_pid(node.pid_file)
                if pid is None or not processes.alive(pid, node.proc):
                    node.pid_file.unlink(missing_ok=True)
                    raise BrokerError(
                        f"broker {node.node_id} exited during start-up; last lines of its "
                        f"logs:\n{node.log_tail()}\nfull log: {node.log_file}"
                    )
            if ping(self.bootstrap, timeout_s=1.0, security=self.security) and (
                len(self.nodes) == 1
                or broker_count(self.bootstrap, 2.0, security=self.security) == len(self.nodes)
            ):
                return
            time.sleep(0.2)
        raise BrokerError(
            f"the brokers do not all answer on {self.bootstrap} after "
            f"{self.settings.start_timeout_s:.0f}s; see {self.log_file}, or stop them with "
            "`kiq broker stop`"
        )


def broker_holding(port: int) -> Path | None:
    """The data directory of the running kiq broker that listens on ``port`` (as a broker
    or a controller), found by its command line and its ``server.properties``; None when
    no kiq broker does, or when this system has no ``/proc`` to tell."""
    try:
        procs = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    for proc in procs:
        try:
            argv = [a for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if _MAIN.encode() not in argv or not argv[-1].endswith(b"server.properties"):
            continue
        properties = Path(os.fsdecode(argv[-1]))
        if port in _listener_ports(properties):
            root = properties.parent
            is_cluster = root.name.startswith("node-") and started_brokers(root.parent) > 1
            return root.parent if is_cluster else root
    return None


def _listener_ports(properties: Path) -> set[int]:
    """The ports ``listeners`` in a broker's ``server.properties`` names."""
    try:
        lines = properties.read_text().splitlines()
    except OSError:
        return set()
    ports: set[int] = set()
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "listeners":
            for listener in value.split(","):
                _, _, port = listener.strip().rpartition(":")
                if port.isdigit():
                    ports.add(int(port))
    return ports


def started_brokers(data_dir: Path) -> int:
    """How many brokers a local cluster under ``data_dir`` was laid out with (0: none)."""
    root = data_dir.resolve()
    if (root / "server.properties").exists():
        return 1
    return len(list(root.glob("node-*/server.properties")))


def _password(path: Path, *, made: bool) -> str:
    """The password in ``path``; one made there first when it is kiq's to make (``made``)."""
    if made and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(24) + "\n")
    try:
        password = path.read_text().strip()
    except OSError as exc:
        raise BrokerError(f"the SASL password file {path} cannot be read: {exc}") from exc
    if not password:
        raise BrokerError(f"the SASL password file {path} is empty")
    return password


def _properties(props: dict[str, str]) -> str:
    """``props`` as a Java properties file, whose reader takes a backslash as an escape."""
    return "".join(f"{key}={_backslashes_doubled(value)}\n" for key, value in props.items())


def _backslashes_doubled(value: str) -> str:
    return value.replace("\\", "\\\\")


def _jaas(value: str) -> str:
    """``value`` inside a JAAS double-quoted string (Kafka's parser takes backslash escapes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's own ``Uuid.randomUuid``, never one that starts with "-": the
    storage tool's argument parser would read it as an option.
    """
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


_LOG4J2 = """\
status = warn
appender.server.type = RollingFile
appender.server.name = server
appender.server.fileName = {log_dir}/server.log
appender.server.filePattern = {log_dir}/server.log.%i
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 20MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.state.name = state.change.logger
logger.state.level = WARN
logger.requests.name = kafka.request.logger
logger.requests.level = WARN
"""

"""A local single-node Kafka broker in KRaft mode (combined broker + controller).

Layout under ``data_dir``: ``server.properties``, ``log4j2.properties``,
``broker.pid`` and ``kraft/`` (Kafka's ``log.dirs``). The broker's own log goes
to ``log_dir/server.log``; its stdout and stderr to ``log_dir/broker.out``.
Start and stop are idempotent; ``start`` returns once the broker answers.

With ``sasl`` the client port is a SASL_PLAINTEXT listener (mechanism PLAIN) with
one user, for developing and testing kiq's Kafka security: its password is
``sasl_password_file``, else one made at first start in ``data_dir/sasl/password``.
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
from dataclasses import dataclass
from pathlib import Path

from kiq.errors import BrokerError
from kiq.kafka import ping
from kiq.kafka.security import KafkaSecurity
from kiq.runtime.jars import kafka_broker_classpath
from kiq.runtime.java import java_executable
from kiq.settings import BrokerSettings

log = logging.getLogger(__name__)

_MAIN = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"


@dataclass(frozen=True)
class BrokerStatus:
    """What `kiq broker status` reports; ``running`` means the process is alive."""

    running: bool
    answering: bool
    pid: int | None
    bootstrap: str
    log_file: Path


class LocalBroker:
    """Starts, stops and inspects one local broker described by ``BrokerSettings``."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        self.log_dir = settings.log_dir.resolve()
        self.kraft_dir = self.data_dir / "kraft"
        self.pid_file = self.data_dir / "broker.pid"
        self.properties = self.data_dir / "server.properties"
        self.log_file = self.log_dir / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def on_free_ports(cls, root: Path, sasl: bool = False) -> LocalBroker:
        """A broker for tests and benchmarks: free loopback ports, everything under ``root``."""
        from kiq.runtime.ports import free_ports

        port, controller = free_ports(2)
        return cls(
            BrokerSettings(
                port=port,
                controller_port=controller,
                data_dir=root / "data",
                log_dir=root / "logs",
                sasl=sasl,
            )
        )

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap

    @property
    def password_file(self) -> Path:
        """The SASL user's password (only with ``sasl``)."""
        given = self.settings.sasl_password_file
        return given.resolve() if given is not None else self.data_dir / "sasl" / "password"

    @property
    def security(self) -> KafkaSecurity:
        """What a client of this broker authenticates with (PLAINTEXT without ``sasl``)."""
        if not self.settings.sasl:
            return KafkaSecurity()
        return KafkaSecurity(
            "SASL_PLAINTEXT", "PLAIN", self.settings.sasl_username, self._password()
        )

    def _password(self) -> str:
        path = self.password_file
        if not path.exists() and self.settings.sasl_password_file is None:
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

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        return BrokerStatus(
            running=pid is not None,
            answering=pid is not None
            and ping(self.bootstrap, timeout_s=2.0, security=self.security),
            pid=pid,
            bootstrap=self.bootstrap,
            log_file=self.log_file,
        )

    def start(self) -> BrokerStatus:
        """Start the broker unless it runs already; return once it answers requests."""
        pid = self._running_pid()
        if pid is None:
            self._check_ports_free()
            classpath = kafka_broker_classpath(self.settings.jars_dir)
            java = java_executable()
            self._write_config()
            self._format(java, classpath)
            pid = self._launch(java, classpath)
            log.info(
                "broker starting pid=%d bootstrap=%s log=%s", pid, self.bootstrap, self.log_file
            )
        self._wait_answering(pid)
        return self.status()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout_s``); False if not running."""
        pid = self._running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while self._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._alive(pid):
            log.warning("broker pid=%d ignored SIGTERM for %.0fs; killing it", pid, timeout_s)
            os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        self._proc = None
        log.info("broker stopped pid=%d", pid)
        return True

    # -- process bookkeeping -------------------------------------------------

    def _running_pid(self) -> int | None:
        """The pid from the pid file if that process is alive and is this broker."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not self._alive(pid) or not self._is_ours(pid):
            return None
        return pid

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True  # cannot tell (no /proc): trust the pid file
        return _MAIN.encode() in cmdline and str(self.properties).encode() in cmdline

    def _check_ports_free(self) -> None:
        for port, what, flag in (
            (self.settings.port, "broker", "--port"),
            (self.settings.effective_controller_port, "controller", "--controller-port"),
        ):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.settings.host, port))
                except OSError as exc:
                    raise BrokerError(
                        f"the {what} port {self.settings.host}:{port} is taken ({exc.strerror}): "
                        f"stop what holds it or choose another with {flag}"
                    ) from exc

    # -- configuration and launch --------------------------------------------

    def _write_config(self) -> None:
        self.kraft_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        host, port = self.settings.host, self.settings.port
        cport = self.settings.effective_controller_port
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{host}:{cport}",
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.kraft_dir),
            "num.partitions": "1",
            # kiq creates every topic with its partition count; a typo must fail loudly.
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Lets tests and the demo use short session timeouts (faster failover).
            "group.min.session.timeout.ms": "1000",
        }
        if self.settings.sasl:
            props.update(self._sasl_properties())
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        if self.settings.sasl:
            self.properties.chmod(0o600)  # it holds the password
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log_dir=self.log_dir))

    def _sasl_properties(self) -> dict[str, str]:
        """The client listener as SASL_PLAINTEXT with PLAIN; the broker talks to itself on it."""
        host, port = self.settings.host, self.settings.port
        cport = self.settings.effective_controller_port
        user = self.security
        login = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user.username}" password="{user.password}" '
            f'user_{user.username}="{user.password}";'
        )
        return {
            "listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": login,
        }

    def _format(self, java: Path, classpath: str) -> None:
        if (self.kraft_dir / "meta.properties").exists():
            return
        cmd = [str(java), "-Xmx256m", "-cp", classpath, *self._logging_flags()]
        cmd += [_STORAGE_TOOL, "format", "--standalone", "--ignore-formatted"]
        cmd += [f"--cluster-id={_cluster_id()}", "-c", str(self.properties)]
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

    def _launch(self, java: Path, classpath: str) -> int:
        cmd = [str(java), f"-Xmx{self.settings.heap}", "-Xms128m", "-XX:+UseG1GC"]
        cmd += ["-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]
        cmd += [*self._logging_flags(), "-cp", classpath, _MAIN, str(self.properties)]
        with (self.log_dir / "broker.out").open("ab") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")
        return self._proc.pid

    def _wait_answering(self, pid: int) -> None:
        security = self.security
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if not self._alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(
                    f"the broker exited during start-up; last lines of its logs:\n"
                    f"{self._log_tail()}\nfull log: {self.log_file}"
                )
            if ping(self.bootstrap, timeout_s=1.0, security=security):
                return
            time.sleep(0.2)
        raise BrokerError(
            f"the broker (pid {pid}) does not answer on {self.bootstrap} after "
            f"{self.settings.start_timeout_s:.0f}s; see {self.log_file}, or stop it with "
            "`kiq broker stop`"
        )

    def _log_tail(self, lines: int = 30) -> str:
        chunks = []
        for path in (self.log_dir / "broker.out", self.log_file):
            if path.exists():
                chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(chunks[-lines:]) or "(no log output)"


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

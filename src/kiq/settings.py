"""Typed, frozen settings read once at the edge (CLI, app factory, tests).

One name per setting everywhere: the TOML table ``[broker]`` key ``port`` is the
environment variable ``KIQ_BROKER_PORT`` and the flag ``kiq broker start --port``.
Precedence, highest first: flags, environment, the TOML file, defaults. The TOML
file is ``--config``, else ``$KIQ_CONFIG``, else ``kiq.toml`` in the working
directory when it exists. A command hands its settings to a child kiq command as
that child's environment (``child_env``), which the child loads back equal.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from kiq import catalog
from kiq.errors import ConfigError
from kiq.targets import is_file

DEFAULT_CONFIG_FILE = "kiq.toml"

# Where `make jars` puts the JVM jars in a kiq checkout, and a file only a checkout has.
JAR_CACHE = Path(".cache") / "jars"
_CHECKOUT_MARKER = Path("jvm") / "kafka-broker" / "pom.xml"


# The TOML file's tables while `load` builds a section (read by `_TomlTable`), and the
# directory its relative paths are relative to.
_TOML: ContextVar[dict[str, Any] | None] = ContextVar("kiq_toml", default=None)
_TOML_DIR: ContextVar[Path | None] = ContextVar("kiq_toml_dir", default=None)


def find_jar_cache(start: Path | None = None) -> Path:
    """The jar cache of the kiq checkout holding ``start`` (default: the working directory).

    The checkout is the nearest directory upward with kiq's Maven manifests, so
    commands run anywhere in it find the jars ``make jars`` fetched, however kiq
    was installed. Outside a checkout it is the per-user cache (``user_jar_cache``),
    which `kiq setup`, or the first command that needs the jars, fills.
    """
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        if (directory / _CHECKOUT_MARKER).is_file():
            return directory / JAR_CACHE
    return user_jar_cache()


def user_jar_cache() -> Path:
    """The per-user jar cache: ``$XDG_CACHE_HOME/kiq/jars``, by default ``~/.cache/kiq/jars``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".cache"  # XDG: else ignored
    return root / "kiq" / "jars"


def is_checkout_jar_cache(jars_dir: Path) -> bool:
    """Whether ``jars_dir`` is the ``.cache/jars`` of a kiq checkout (which `make jars` fills)."""
    path = jars_dir.absolute()
    return path.parts[-2:] == JAR_CACHE.parts and (path.parents[1] / _CHECKOUT_MARKER).is_file()


class _TomlTable(PydanticBaseSettingsSource):
    """One table of the kiq TOML file, as a settings source.

    One path rule: a relative path in the file (a ``Path`` setting, a section's
    ``file_paths``, a ``FILE.py:FUNCTION`` target, a table's ``schema=``) is relative to
    the file's directory, wherever kiq runs; flags and the environment are relative to
    the working directory, as on any command line.
    """

    def __init__(self, settings_cls: type[BaseSettings], table: str) -> None:
        super().__init__(settings_cls)
        values = (_TOML.get() or {}).get(table, {})
        if not isinstance(values, dict):
            raise ConfigError(f"[{table}] in the config file must be a table")
        base = _TOML_DIR.get()
        if base is not None:
            values = {
                name: _beside(base, value, settings_cls.model_fields.get(name), name, settings_cls)
                for name, value in values.items()
            }
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _beside(
    base: Path, value: Any, field: FieldInfo | None, name: str, section: type[BaseSettings]
) -> Any:
    """``value`` of setting ``name`` with its relative paths made relative to ``base``."""
    kinds = getattr(section, "file_paths", {})
    kind = kinds.get(name) or ("path" if field is not None and _is_path(field) else None)
    if kind is None:
        return value
    if kind == "path":
        return _path_beside(base, value)
    if kind == "targets" and isinstance(value, list):
        return [_target_beside(base, v) for v in value]
    if kind == "tables" and isinstance(value, list):
        return [_schema_beside(base, v) for v in value]
    return value


def _is_path(field: FieldInfo) -> bool:
    return "Path" in str(field.annotation)


def _path_beside(base: Path, value: Any) -> Any:
    if not isinstance(value, str | Path) or "://" in str(value):
        return value
    path = Path(value).expanduser()
    return value if path.is_absolute() else str(base / path)


def _target_beside(base: Path, target: Any) -> Any:
    """``FILE.py:FUNCTION`` relative to ``base``; a module target as it is."""
    if not isinstance(target, str):
        return target
    where, colon, attr = target.rpartition(":")
    if not colon or not is_file(where) or Path(where).is_absolute():
        return target
    return f"{base / where}:{attr}"


def _schema_beside(base: Path, entry: Any) -> Any:
    """A ``[serve] tables`` entry whose ``schema=PATH`` is made relative to ``base``."""
    if not isinstance(entry, str) or "schema=" not in entry:
        return entry
    parts = entry.split(",")
    for i, part in enumerate(parts):
        key, eq, value = part.partition("=")
        if eq and key.strip() == "schema":
            parts[i] = f"{key}={_path_beside(base, value.strip())}"
    return ",".join(parts)


class _Section(BaseSettings):
    """Base for one TOML table; subclasses set ``table`` and the env prefix."""

    table: ClassVar[str]
    # Settings holding paths that are not ``Path`` fields: name -> "path" (a path or a
    # URI), "targets" (FILE.py:FUNCTION entries) or "tables" ([serve] tables entries).
    file_paths: ClassVar[dict[str, str]] = {}
    # Flags named otherwise than their setting (the issue that asked for them named them).
    flag_names: ClassVar[dict[str, str]] = {}
    # Flags are the keys' names, after this prefix where a command's flags carry the table's.
    flag_prefix: ClassVar[str] = ""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlTable(settings_cls, cls.table))

    def as_env(self) -> dict[str, str]:
        """These settings as the environment of a child kiq command (see ``child_env``).

        Lists and tables go as JSON, as the environment takes them; paths absolute,
        since a child may run in another directory; an unset (None) setting is left
        out, so the child has it unset too.
        """
        prefix = self.model_config.get("env_prefix", "")
        return {
            f"{prefix}{name.upper()}": _env_value(value)
            for name, value in self
            if value is not None
        }


def _env_value(value: object) -> str:
    if isinstance(value, Path):
        return str(value.absolute())
    if isinstance(value, list | dict):
        return json.dumps(value)
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return str(value)


_SASL_USER = re.compile(r"[A-Za-z0-9._-]+")


class BrokerSettings(_Section):
    """The local KRaft broker (or ``brokers`` of them) that `kiq broker` runs for development.

    With several, broker ``i`` (from 0) listens on ``port + i`` and its controller on
    ``controller_port + i``; each is a combined broker and controller, a quorum voter.
    """

    table: ClassVar[str] = "broker"
    flag_names: ClassVar[dict[str, str]] = {"sasl_users": "--sasl-user"}
    model_config = SettingsConfigDict(env_prefix="KIQ_BROKER_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int = Field(0, ge=0, le=65535, description="0 means port + brokers")
    brokers: int = Field(1, ge=1, le=9, description="a local cluster of this many brokers")
    data_dir: Path = Path(".kiq/broker/data")
    log_dir: Path = Path(".kiq/broker/logs")
    heap: str = "512m"
    start_timeout_s: float = Field(60.0, gt=0)
    jars_dir: Path = Field(default_factory=find_jar_cache, description="the broker's jars")
    # Development SASL: the client port takes SASL_PLAINTEXT with PLAIN, one user.
    sasl: bool = Field(False, description="a SASL_PLAINTEXT (PLAIN) client listener")
    sasl_username: str = Field("kiq", min_length=1)
    sasl_password_file: Path | None = Field(
        None, description="the user's password; default: one made under data_dir/sasl/"
    )
    # More PLAIN users, "NAME" (password made in data_dir/sasl/NAME.password) or "NAME=FILE".
    sasl_users: list[str] = Field(default_factory=list, description="more SASL users")
    # Kafka's StandardAuthorizer: sasl_username is the super user, the others get only ACLs.
    acl: bool = Field(False, description="ACLs decide what each SASL user may do")

    @field_validator("sasl_users")
    @classmethod
    def _users(cls, users: list[str]) -> list[str]:
        names = [user.partition("=")[0] for user in users]
        for user, name in zip(users, names, strict=True):
            if not _SASL_USER.fullmatch(name) or user.endswith("="):
                raise ValueError(
                    f"{user!r} is not NAME or NAME=PASSWORD_FILE (NAME: A-Z a-z 0-9 ._-)"
                )
        if len(set(names)) < len(names):
            raise ValueError(f"a user is named twice in {users}")
        return users

    @model_validator(mode="after")
    def _sasl_needed(self) -> BrokerSettings:
        if (self.acl or self.sasl_users) and not self.sasl:
            raise ValueError("acl and sasl_users need sasl (kiq broker start --sasl --acl ...)")
        if self.sasl_username in {u.partition("=")[0] for u in self.sasl_users}:
            raise ValueError(f"sasl_users names sasl_username {self.sasl_username!r} again")
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.port + i}" for i in range(self.brokers))

    @property
    def effective_controller_port(self) -> int:
        return self.controller_port or self.port + self.brokers


class SparkSettings(_Section):
    """How kiq pipelines reach Spark: a master, the connector jars, checkpoints."""

    table: ClassVar[str] = "spark"
    file_paths: ClassVar[dict[str, str]] = {"checkpoint_dir": "path"}
    model_config = SettingsConfigDict(env_prefix="KIQ_SPARK_", frozen=True, extra="forbid")

    master: str = "local[*]"
    app_name: str = "kiq"
    # A path, or a URI Spark reaches through Hadoop (hdfs://, s3a://, gs://, abfss://).
    # On a cluster, the driver and every executor must reach the same place.
    checkpoint_dir: str = ".kiq/checkpoints"
    jars_dir: Path = Field(default_factory=find_jar_cache, description="the connector's jars")
    # State partitions of every stateful query, fixed once a query has a checkpoint.
    # Each is a RocksDB store opened and committed every micro-batch: on a local
    # master one is fastest (measured: 4 → 1 cut batch times by about 40%);
    # 0 means that on a local master and Spark's default (200) elsewhere.
    shuffle_partitions: int = Field(0, ge=0, description="0: 1 locally, else Spark's default")
    # Tasks reading a Kafka input per micro-batch. Each task pays for scheduling and
    # for generating its projections, however few rows it reads: on a local master
    # one task for all partitions (and so no shuffle before one state partition) is
    # fastest; 0 means that on a local master and one task per Kafka partition elsewhere.
    input_tasks: int = Field(0, ge=0, description="0: 1 locally, else one per Kafka partition")
    driver_memory: str = "1g"
    ui: bool = False
    conf: dict[str, str] = Field(default_factory=dict, description="extra spark.* settings")

    @field_validator("checkpoint_dir", mode="before")
    @classmethod
    def _path_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, Path) else value

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def checkpoint_uri(self) -> bool:
        """Whether checkpoints go to a URI (a shared store) rather than a local path."""
        return "://" in self.checkpoint_dir

    @property
    def checkpoint_root(self) -> str:
        """The checkpoint root as Spark takes it: a URI as given, a path made absolute."""
        if self.checkpoint_uri:
            return self.checkpoint_dir.rstrip("/")
        return str(Path(self.checkpoint_dir).resolve())

    @property
    def input_tasks_per_batch(self) -> int | None:
        """Tasks that read an input per batch; None: Spark's own split (one per partition)."""
        return self.input_tasks or (1 if self.local else None)


class SparkClusterSettings(_Section):
    """The local Spark standalone cluster `kiq spark` runs: one master, one worker, loopback.

    Pipelines use it with ``[spark] master`` set to the URL ``kiq spark start`` prints.
    """

    table: ClassVar[str] = "spark_cluster"
    model_config = SettingsConfigDict(env_prefix="KIQ_SPARK_CLUSTER_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(7077, ge=1, le=65535, description="the master's port")
    ui_port: int = Field(0, ge=0, le=65535, description="the master's web UI; 0 means port + 1")
    worker_cores: int = Field(2, ge=1, description="cores the worker offers to executors")
    worker_memory: str = Field("2g", description="memory the worker offers to executors")
    daemon_memory: str = Field("256m", description="heap of the master and worker themselves")
    data_dir: Path = Path(".kiq/spark")
    start_timeout_s: float = Field(90.0, gt=0)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def effective_ui_port(self) -> int:
        return self.ui_port or self.port + 1


class PipelineSettings(_Section):
    """`kiq pipeline run`: the Kafka cluster the pipelines read and write, and their pace."""

    table: ClassVar[str] = "pipeline"
    model_config = SettingsConfigDict(env_prefix="KIQ_PIPELINE_", frozen=True, extra="forbid")

    bootstrap: str = "127.0.0.1:9092"
    # auto: Real-Time Mode for every query Spark runs so with the task slots it needs,
    # micro-batches for the rest (one log line says which and why); realtime: an error instead.
    trigger: Literal["auto", "microbatch", "realtime"] = "auto"
    interval: str = Field("0 seconds", description="micro-batch interval")
    realtime_batch: str = Field(
        "5 minutes", description="how long one Real-Time Mode batch lasts (its checkpoint)"
    )
    partitions: int = Field(30, ge=1, description="of an input topic the pipeline creates")
    # Which version of their tables the pipelines write: v1 the topics and checkpoints they
    # always had; another (v2) its own (TOPIC.v2, PIPELINE@v2) beside them, until switched.
    # Its name is checked where it is used (kiq.tables.versions, a layer above settings).
    version: str = Field("v1", description="version of the tables the pipelines write")


class ServeSettings(_Section):
    """One serving node: `kiq serve`."""

    table: ClassVar[str] = "serve"
    file_paths: ClassVar[dict[str, str]] = {"tables": "tables"}
    model_config = SettingsConfigDict(env_prefix="KIQ_SERVE_", frozen=True, extra="forbid")

    bootstrap: str = "127.0.0.1:9092"
    node_id: str = "node-1"
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    advertise: str = Field(
        "", description="URL other nodes reach this one at; default http://host:port"
    )
    data_dir: Path = Path(".kiq/node-1")
    # RocksDB's memory in this node, all stores together: block cache plus memtables
    # (which may take half of it before they are flushed). See stores/budget.py.
    store_memory_mb: int = Field(128, ge=8, description="RocksDB memory of all stores")
    # Processes answering the port: the node's own and read workers (kiq.workers).
    workers: int = Field(
        0,
        ge=0,
        le=256,
        description="0: one per CPU available (affinity, or cgroup quota if smaller)",
    )
    tables: list[str] = Field(default_factory=list, description="NAME=TOPIC[,option...]")
    standby_replicas: int = Field(1, ge=0, le=10)
    cluster: str = Field("kiq", description="consumer group of the serving nodes")
    dead_letter_topic: str = catalog.DEAD_LETTERS
    session_timeout_ms: int = Field(6000, ge=500)
    ready_max_lag: int = Field(1000, ge=0)
    linger_s: float = Field(30.0, ge=0)
    forward_timeout_ms: int = Field(2000, gt=0)
    # Hedged forwarding (peers/hedging.py): a forwarded lookup the first replica has
    # not answered within this percentile of recent forward latencies, kept between
    # the floor and the cap, goes to the next replica too. A cap of 0 turns it off.
    forward_hedge_percentile: float = Field(99.0, gt=0, le=100)
    forward_hedge_floor_ms: int = Field(10, ge=0)
    forward_hedge_cap_ms: int = Field(100, ge=0, description="0: never hedge")
    view_refresh_ms: int = Field(500, ge=50)
    # Tables that age (replicas/expiry.py): how often each one's cutoffs are refreshed and
    # its partitions swept; 0: a tenth of its TTL (or retention), from 1 to 60 s.
    expiry_sweep_s: float = Field(0.0, ge=0, description="0: ttl/10, kept between 1 and 60 s")

    @property
    def advertised_url(self) -> str:
        return (self.advertise or f"http://{self.host}:{self.port}").rstrip("/")


class TenantQuota(BaseModel):
    """One tenant's own quota (``[limits.tenants.quotas.NAME]``): each unset one is the
    tenants' default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float | None = Field(None, ge=0, description="requests per second; 0: no limit")
    burst: int | None = Field(None, ge=0, description="requests at once; 0: one second's worth")
    bytes_rate: float | None = Field(
        None, ge=0, description="response bytes per second; 0: no limit"
    )
    scans: int | None = Field(None, ge=0, description="range, top, windows or index reads at once")
    watches: int | None = Field(None, ge=0, description="watch streams open at once")


class TenantLimits(BaseModel):
    """Quotas per tenant (``[limits.tenants]``, api/tenants.py): a tenant is the value of one
    claim of the caller's verified token (``claim``), else its address; 0 turns one off."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    claim: str = Field("sub", min_length=1, description="the token claim that names a tenant")
    rate: float = Field(0.0, ge=0, description="requests per second per tenant; 0: no limit")
    burst: int = Field(0, ge=0, description="requests at once per tenant; 0: one second's worth")
    bytes_rate: float = Field(
        0.0, ge=0, description="response bytes per second per tenant; 0: no limit"
    )
    scans: int = Field(
        0, ge=0, description="range, top, windows and index reads at once per tenant; 0: any"
    )
    watches: int = Field(0, ge=0, description="watch streams open at once per tenant; 0: any")
    quotas: dict[str, TenantQuota] = Field(
        default_factory=dict, description="a tenant's own quota, by its name"
    )

    @property
    def enabled(self) -> bool:
        """Whether any tenant has a quota: the node only counts tenants then."""
        own = (q for q in self.quotas.values())
        fields = ("rate", "bytes_rate", "scans", "watches")
        return any(getattr(self, f) for f in fields) or any(
            getattr(q, f) for q in own for f in fields
        )


class LimitsSettings(_Section):
    """A node's limits against abuse: bodies, batch sizes, connections, slow and greedy clients.

    The connection limit and the header timeout are granian's own (``backpressure``:
    a connection holds a permit while open, later ones wait in the backlog; its HTTP/1
    header read timer also runs while a kept-alive connection waits for its next
    request, so it is the idle timeout too). The rate limit (api/limits.py) is per
    client, by token subject else address, and off at 0.
    """

    table: ClassVar[str] = "limits"
    model_config = SettingsConfigDict(env_prefix="KIQ_LIMITS_", frozen=True, extra="forbid")

    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="request body")
    max_multiget_keys: int = Field(10_000, ge=1, description="keys per multiget")
    window_cache_bytes: int = Field(
        16 * 1024 * 1024,
        ge=0,
        description="pages of windows kept while their partition is unchanged; 0: none",
    )
    max_connections: int = Field(2048, ge=1, description="open connections per node")
    max_watches: int = Field(
        20_000, ge=1, description="watch streams (Server-Sent Events) at once per node, then 503"
    )
    max_watch_pending: int = Field(
        10_000,
        ge=1,
        description="keys changed and not yet taken by one watch stream before it is dropped",
    )
    max_parked_waits: int = Field(
        1024, ge=1, description="lookups waiting for min_offset at once per node, then 429"
    )
    max_parked_waits_per_caller: int = Field(
        64, ge=1, description="lookups waiting for min_offset at once per client, then 429"
    )
    # api/holds.py: no caller takes the node's connection slots (health and peers keep some).
    max_watches_per_caller: int = Field(
        64, ge=1, description="watch streams open at once per client, then 429"
    )
    max_requests_per_caller: int = Field(
        128, ge=1, description="requests in flight at once per client (not health or peers)"
    )
    reserved_connections: int = Field(
        256, ge=0, description="slots kept for health and peers (at most half the slots)"
    )
    header_timeout_s: float = Field(
        30.0, gt=0, le=60, description="to send a request's headers, and to idle between requests"
    )
    rate_limit: float = Field(0.0, ge=0, description="requests per second per client; 0: off")
    rate_burst: int = Field(0, ge=0, description="requests at once; 0: one second's worth")
    rate_clients: int = Field(100_000, ge=1, description="clients the rate limit remembers")
    auth_failure_rate: float = Field(
        20.0, ge=0, description="refused credentials per second per address, then 429; 0: off"
    )
    auth_failure_burst: int = Field(100, ge=1, description="refused credentials at once")
    tenants: TenantLimits = Field(
        default_factory=TenantLimits,
        description="quotas per tenant ([limits.tenants]; see the table below)",
    )

    @property
    def burst(self) -> int:
        return self.rate_burst or max(1, math.ceil(self.rate_limit))

    @property
    def request_slots(self) -> int:
        """Connection slots callers' requests may hold: those not kept for health and peers."""
        return self.max_connections - min(self.reserved_connections, self.max_connections // 2)

    @property
    def stream_slots(self) -> int:
        """Watch streams at once on the node: within ``request_slots``, whatever max_watches."""
        return min(self.max_watches, self.request_slots)


class AuthSettings(_Section):
    """Who may ask a node what (kiq.security): bearer tokens, and the cluster's own secret.

    Files, never secret values: the node reads them once at startup, so no secret is
    in a setting, a log line or /v1/metadata. ``mode`` unset means ``none`` on a
    loopback address; a node listening on any other refuses to start without it.
    """

    table: ClassVar[str] = "auth"
    flag_names: ClassVar[dict[str, str]] = {"mode": "--auth"}
    model_config = SettingsConfigDict(env_prefix="KIQ_AUTH_", frozen=True, extra="forbid")

    mode: Literal["none", "jwt"] | None = Field(
        None, description="jwt: bearer tokens on the API; unset: none, on loopback only"
    )
    jwt_secret_file: Path | None = Field(None, description="HS256/384/512 shared secret")
    jwt_public_key_file: Path | None = Field(None, description="PEM: RS*/PS*, ES*, EdDSA")
    jwt_jwks_file: Path | None = Field(None, description="JWKS, keys by kid, re-read on change")
    jwt_audience: str | None = Field(None, description="required aud claim")
    jwt_issuer: str | None = Field(None, description="required iss claim")
    jwt_leeway_s: float = Field(30.0, ge=0, le=300, description="clock skew allowed on exp/nbf")
    cluster_secret_file: Path | None = Field(
        None, description="shared by every node: signs node-to-node requests"
    )
    token_cache_size: int = Field(10_000, ge=1, description="verified tokens remembered")


def _readable(path: Path | None, what: str) -> Path | None:
    """``path`` if it is a file kiq can read; a ValueError that names it if not."""
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist or is not a file")
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    return path


class TlsSettings(_Section):
    """HTTPS on a node's API and between nodes (``kiq.security.tls`` builds the contexts).

    ``cert`` and ``key`` (PEM) make a node serve HTTPS; ``ca`` (a PEM bundle) is what
    peers' certificates are verified against, else the system's trusted roots.
    """

    table: ClassVar[str] = "tls"
    flag_prefix: ClassVar[str] = "tls-"
    model_config = SettingsConfigDict(env_prefix="KIQ_TLS_", frozen=True, extra="forbid")

    cert: Path | None = Field(None, description="the node's certificate chain (PEM)")
    key: Path | None = Field(None, description="the certificate's private key (PEM)")
    ca: Path | None = Field(None, description="CA bundle (PEM) that peers are verified against")

    @field_validator("cert", "key", "ca")
    @classmethod
    def _file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        names = {"cert": "certificate", "key": "private key", "ca": "CA bundle"}
        return _readable(path, f"TLS {names[str(info.field_name)]}")

    @model_validator(mode="after")
    def _pair(self) -> TlsSettings:
        if (self.cert is None) != (self.key is None):
            given, missing = ("cert", "key") if self.key is None else ("key", "cert")
            raise ValueError(
                f"TLS needs both a certificate and its key: {given} given, {missing} not"
            )
        return self

    @property
    def enabled(self) -> bool:
        """Whether the node serves HTTPS (and so calls its peers over HTTPS)."""
        return self.cert is not None


KafkaProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSettings(_Section):
    """How every Kafka client kiq makes authenticates (``kiq.kafka.security`` applies it).

    The password is named by a file, never given itself, so it stays out of
    command lines, environments and the TOML file; it is read once at start-up.
    """

    table: ClassVar[str] = "kafka"
    model_config = SettingsConfigDict(env_prefix="KIQ_KAFKA_", frozen=True, extra="forbid")

    security_protocol: KafkaProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str = ""
    sasl_password_file: Path | None = None
    ssl_ca_file: Path | None = Field(None, description="CA bundle (PEM) for the brokers' certs")

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("sasl_password_file", "ssl_ca_file")
    @classmethod
    def _file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        return _readable(path, str(info.field_name).replace("_", " "))

    @model_validator(mode="after")
    def _credentials(self) -> KafkaSettings:
        if self.sasl and not (self.sasl_username and self.sasl_password_file):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_username "
                "and sasl_password_file"
            )
        return self

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


class AppSettings(_Section):
    """An application: what `kiq up` runs, and the routes every `kiq serve` node mounts.

    Its tables are ``[serve] tables``; the rest of the file configures the parts as
    it does for each command on its own.
    """

    table: ClassVar[str] = "app"
    file_paths: ClassVar[dict[str, str]] = {"pipelines": "targets", "endpoints": "targets"}
    model_config = SettingsConfigDict(env_prefix="KIQ_APP_", frozen=True, extra="forbid")

    name: str = Field("kiq", pattern=r"^[A-Za-z0-9._-]+$")
    pipelines: list[str] = Field(
        default_factory=list, description="TARGETs of `kiq pipeline run`, one Spark driver"
    )
    endpoints: list[str] = Field(
        default_factory=list,
        description="module:function or file.py:function, each declaring HTTP routes; "
        "none: the core API only",
    )
    nodes: int = Field(3, ge=1, le=32, description="kiq up: serving nodes")
    port: int = Field(8080, ge=1, le=65535, description="kiq up: the first node's port")
    bootstrap: str = Field("", description="kiq up: Kafka to use; empty: the [broker] it runs")
    home: Path | None = Field(None, description="kiq up: state and logs [.kiq/NAME]")
    topics: dict[str, int] = Field(
        default_factory=dict, description="kiq up: input topics to create, name = partitions"
    )
    partitions: int | None = Field(
        None, ge=1, description="kiq up: of a table topic it creates [the first topic's, or 30]"
    )
    feeds: list[list[str]] = Field(
        default_factory=list, description="kiq up: commands to run beside (kiq ... = this kiq)"
    )
    examples: list[str] = Field(
        default_factory=list, description="kiq up: requests to print, {url} the front door"
    )

    @property
    def home_dir(self) -> Path:
        return self.home if self.home is not None else Path(".kiq") / self.name

    def own_broker(self, broker: BrokerSettings) -> BrokerSettings:
        """The local broker `kiq up` runs for this application: its data and logs under
        ``home`` (``HOME/broker/data``, ``HOME/broker/logs``), so that two applications
        started from one directory never share topics, unless ``[broker] data_dir`` or
        ``log_dir`` was given (file, environment or flag) to say where."""
        given = broker.model_fields_set
        update = {
            name: self.home_dir / "broker" / leaf
            for name, leaf in (("data_dir", "data"), ("log_dir", "logs"))
            if name not in given
        }
        return broker.model_copy(update=update)

    @property
    def table_partitions(self) -> int:
        """Partitions of a table topic `kiq up` creates: a table's keys are the input's."""
        return self.partitions or next(iter(self.topics.values()), 30)


class FeedSettings(_Section):
    """A tick feed into Kafka: `kiq feed stocks` and `kiq feed replay` (kiq.feeds).

    ``exchanges`` is a list in TOML; the flag and the environment variable take it
    comma-separated (``NYSE,NASDAQ``) or as a JSON list.
    """

    table: ClassVar[str] = "feed"
    model_config = SettingsConfigDict(env_prefix="KIQ_FEED_", frozen=True, extra="forbid")

    bootstrap: str = "127.0.0.1:9092"
    topic: str = Field(
        catalog.STOCK_TICKS, min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$"
    )
    symbols: int = Field(
        100, ge=1, le=catalog.STOCK_SYMBOL_COUNT, description="how many symbols tick"
    )
    exchanges: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [*catalog.STOCK_EXCHANGES]
    )
    # What a laptop running the whole demo (broker, Spark, three nodes) holds in
    # Real-Time Mode; 1,000 it does not (docs/benchmarks.md). `kiq demo` runs at this.
    rate: float = Field(500.0, gt=0, description="ticks per second")
    seed: int = 42
    trade_ratio: float = Field(0.3, ge=0, le=1, description="share of ticks carrying a trade")
    create_topic: bool = True
    partitions: int = Field(30, ge=1, description="of the topic, when kiq creates it")
    linger_ms: int = Field(5, ge=0, le=1000)

    @field_validator("exchanges", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"not a JSON list: {exc}") from exc
            return [part.strip() for part in text.split(",")]
        return value

    @field_validator("exchanges")
    @classmethod
    def _check(cls, value: list[str]) -> list[str]:
        names = [name.upper() for name in value]
        bad = [name for name in names if not _EXCHANGE.fullmatch(name)]
        if not names or bad:
            raise ValueError(
                "give exchange names, comma-separated, like NYSE,NASDAQ,IEX "
                f"(each matching {_EXCHANGE.pattern}); bad: {bad or 'empty list'}"
            )
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"each exchange once, please; repeated: {', '.join(duplicates)}")
        return names


_EXCHANGE = re.compile(catalog.STOCK_EXCHANGE_PATTERN)


S = TypeVar("S", bound=_Section)


@dataclass(frozen=True)
class NodeSettings:
    """Everything one serving node is configured by, each section read once at the edge.

    ``kiq serve`` loads it and ``kiq.node_build.build_node`` builds the node from it
    alone; ``kiq up`` hands it to each child node as its environment (``as_env``).
    ``config_file`` is the application file, beside which ``[app] endpoints`` given as
    ``FILE.py:FUNCTION`` are found.
    """

    serve: ServeSettings
    limits: LimitsSettings
    auth: AuthSettings
    tls: TlsSettings
    kafka: KafkaSettings
    app: AppSettings
    config_file: Path | None = None

    @classmethod
    def load(
        cls,
        config: Path | None = None,
        *,
        serve: Mapping[str, Any] | None = None,
        limits: Mapping[str, Any] | None = None,
        auth: Mapping[str, Any] | None = None,
        tls: Mapping[str, Any] | None = None,
        kafka: Mapping[str, Any] | None = None,
        app: Mapping[str, Any] | None = None,
    ) -> NodeSettings:
        """Every section from its flags (``None`` meaning not given), env and the file."""
        path = config_path(config)
        return cls(
            serve=load(ServeSettings, path, **(serve or {})),
            limits=load(LimitsSettings, path, **(limits or {})),
            auth=load(AuthSettings, path, **(auth or {})),
            tls=load(TlsSettings, path, **(tls or {})),
            kafka=load(KafkaSettings, path, **(kafka or {})),
            app=load(AppSettings, path, **(app or {})),
            config_file=path.absolute() if path is not None else None,
        )

    @property
    def sections(self) -> tuple[_Section, ...]:
        return (self.serve, self.limits, self.auth, self.tls, self.kafka, self.app)

    def as_env(self) -> dict[str, str]:
        """The environment of a child `kiq serve` that loads these very settings."""
        return child_env(*self.sections, config=self.config_file)


def child_env(*sections: _Section, config: Path | None = None) -> dict[str, str]:
    """The environment under which a child kiq command loads ``sections`` equal to these
    and reads ``config`` as its file: the one way a command hands settings on.

    The environment beats the child's file, and the child's own flags beat both.
    """
    env = {"KIQ_CONFIG": str(config.absolute())} if config is not None else {}
    for section in sections:
        env.update(section.as_env())
    return env


def config_path(explicit: Path | None = None) -> Path | None:
    """The TOML file to read: the flag, else ``$KIQ_CONFIG``, else ./kiq.toml if present."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"config file {explicit} does not exist: fix --config")
        return explicit
    env = os.environ.get("KIQ_CONFIG")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist: fix $KIQ_CONFIG")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def load_toml(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


def load(section: type[S], config: Path | None = None, **flags: Any) -> S:
    """Build ``section`` from flags (``None`` means not given), env and the TOML file."""
    from pydantic import ValidationError

    path = config_path(config)
    token = _TOML.set(load_toml(path))
    where = _TOML_DIR.set(path.absolute().parent if path is not None else None)
    try:
        return section(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(_describe(section, exc)) from exc
    finally:
        _TOML_DIR.reset(where)
        _TOML.reset(token)


def _describe(section: type[_Section], exc: Any) -> str:
    prefix = section.model_config.get("env_prefix", "")
    lines = [f"invalid [{section.table}] settings:"]
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"])
        if not name:  # a rule over several settings: its message names them
            lines.append(f"  {err['msg']}")
            continue
        flag = section.flag_names.get(name, f"--{section.flag_prefix}{name.replace('_', '-')}")
        lines.append(
            f"  {name}: {err['msg']} (flag {flag}, "
            f"env {prefix}{name.upper()}, TOML [{section.table}] {name})"
        )
    return "\n".join(lines)

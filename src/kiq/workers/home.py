"""The writer's side of ``kiq serve --workers N``: its private listener and its workers.

The node process (the writer: Kafka, materializer, group) serves the public port as
before, and N-1 read workers serve the same port beside it: each binds it with
SO_REUSEPORT (granian's own listener does), and the kernel spreads new connections
over the processes. The writer also listens on a Unix socket of its own, which only
its workers call (``HomeApp``): their snapshot polls, the requests they hand over
(watches, admin, writes, what peers forward) and the reads their copies cannot answer.

``Home`` is the node's private directory (``tempfile.mkdtemp``: mode 0700, a new name
each start) holding that socket (mode 0600) and the table every process of the node
counts its limits in (``api/node_buckets.py``): no other local user can reach the
listener or read what crosses it (callers' tokens, the worker token), and nobody can
take its place between its naming and its binding, since the workers learn its path
only once it accepts connections (``Home.listening``).

``Workers`` starts them (``python -m kiq.workers``, with the node's settings as their
environment), starts one again when it dies, and stops them with the node. A worker
whose node is gone (killed, even with -9) exits on its own: the kernel tells it
(PR_SET_PDEATHSIG), and it stops hearing from its node.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kiq.api.asgi import Receive, Scope, Send, header, query, respond
from kiq.api.limits import REGIONS, count_node_wide
from kiq.api.node_buckets import BucketTable
from kiq.errors import KiqError
from kiq.node import Node
from kiq.peers.pool import UNIX
from kiq.runtime import processes
from kiq.settings import LimitsSettings
from kiq.workers.state import (
    CLIENT_HEADER,
    STATE_PATH,
    TOKEN_HEADER,
    digest,
    snapshot,
    take_report,
)

log = logging.getLogger(__name__)

RESPAWN_DELAY_S = 1.0
HOLD_S = 1.0  # the longest a worker's poll is held while nothing changes
CHANGE_CHECK_S = 0.005  # how often a held poll looks for a change
_TOKEN = TOKEN_HEADER.encode()
_CLIENT = CLIENT_HEADER.encode()
_OCTETS = ((b"content-type", b"application/json"),)
_PRIVATE = (_TOKEN, _CLIENT)  # read here, never passed on to the app
SOCKET = "home.sock"
LIMITS = "limits"
LISTEN_S = 10.0  # how long the node waits for its own socket to accept connections


class HomeApp:
    """The private listener: ``app`` (the node's own), with the workers' snapshot route.

    A request carrying the node's worker token is a worker's: the caller's address it
    forwards (``x-kiq-client``) becomes the request's, for rate limits and logs. Neither
    header reaches the app, whoever sent it: no route (an application's own included)
    sees the worker token.
    """

    def __init__(self, app: Any, node: Node, token: str) -> None:
        self._app = app
        self._node = node
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the public listener's lifespan runs the node
            await _ack_lifespan(receive, send)
            return
        given, client = _taken_out(scope)
        if scope["type"] == "http":
            trusted = given is not None and hmac.compare_digest(given.encode(), self._token)
            if scope["path"] == STATE_PATH:
                if not trusted:
                    await respond(send, 403, b'{"error":"forbidden","detail":"workers only"}')
                    return
                body = await _body(receive)
                if body:
                    try:
                        take_report(body, self._node.metrics)
                    except Exception as exc:  # counters lost, the snapshot still goes
                        log.warning("worker report unreadable error=%s", exc)
                await respond(send, 200, await self._snapshot(scope), _OCTETS)
                return
            if trusted and client:
                scope["client"] = (client, 0)
        await self._app(scope, receive, send)

    async def _snapshot(self, scope: Scope) -> bytes:
        """The snapshot once it differs from the one the worker has (``since``: its digest),
        or after ``HOLD_S`` regardless: a worker idles at one poll a second, and still
        hears that its node lives."""
        node = self._node
        asked = query(scope)
        try:
            have, since = int(asked.get("view", "-1")), int(asked.get("since", "0"))
        except ValueError:
            have, since = -1, 0
        held = time.monotonic() + HOLD_S
        while True:
            ready = node.is_ready()
            now = digest(node.tables, node.current, node.replicas, node.view, ready)
            if now != since or time.monotonic() > held:
                break
            await asyncio.sleep(CHANGE_CHECK_S)
        return snapshot(node.tables, node.current, node.replicas, node.view, ready, have, taken=now)


def _taken_out(scope: Scope) -> tuple[str | None, str | None]:
    """The worker token and the caller's address a request carries, out of its headers."""
    given, client = header(scope, _TOKEN), header(scope, _CLIENT)
    if given is not None or client is not None:
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in _PRIVATE]
    return given, client


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _ack_lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def new_token() -> str:
    return secrets.token_urlsafe(32)


class Home:
    """The node's private directory: its listener's socket, and its node-wide limit table.

    Made before the node's app (``open``), so the app's limiters count in the table;
    ``remove`` when the node stops."""

    def __init__(self, path: Path, table: BucketTable) -> None:
        self.path = path
        self.socket = path / SOCKET
        self.table = table
        self.token = new_token()

    @classmethod
    def open(cls, limits: LimitsSettings) -> Home:
        path = Path(tempfile.mkdtemp(prefix="kiq-node-"))  # 0700, a name nobody had
        try:
            made = os.lstat(path)
            if not stat.S_ISDIR(made.st_mode) or stat.S_IMODE(made.st_mode) != 0o700:
                raise KiqError(f"{path} is not a private directory: check TMPDIR")
            if len(os.fsencode(path / SOCKET)) > 100:  # sun_path holds 108 bytes
                raise KiqError(f"{path} is too long a path for a socket: set a shorter TMPDIR")
            table = BucketTable.create(path / LIMITS, limits.rate_clients, REGIONS)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        count_node_wide(table)
        log.info("node home path=%s", path)
        return cls(path, table)

    @property
    def url(self) -> str:
        return UNIX + str(self.socket)

    async def listening(self, timeout_s: float = LISTEN_S) -> None:
        """Returns once the socket accepts connections (its mode set to 0600 first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                os.chmod(self.socket, 0o600)
                _, writer = await asyncio.open_unix_connection(self.socket)
                writer.close()
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    why = f"the node's own socket {self.socket} did not open: {exc}"
                    raise KiqError(why) from exc
                await asyncio.sleep(0.005)

    def remove(self) -> None:
        count_node_wide(None)
        self.table.close()
        shutil.rmtree(self.path, ignore_errors=True)


class Workers:
    """``count`` read workers of one node, kept running until ``stop``."""

    def __init__(self, count: int, env: dict[str, str], home: Home) -> None:
        self._count = count
        self._env = {
            **os.environ,
            **env,
            "KIQ_WORKER_HOME": home.url,
            "KIQ_WORKER_TOKEN": home.token,
            "KIQ_WORKER_LIMITS": str(home.table.path),
        }
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values()]

    def start(self) -> None:
        for index in range(1, self._count + 1):
            self._spawn(index)
        self._watch = asyncio.get_running_loop().create_task(self._keep())

    def _spawn(self, index: int) -> None:
        env = {**self._env, "KIQ_WORKER_INDEX": str(index)}
        # its output is the node's; the kernel SIGTERMs it when the node's process ends
        self._procs[index] = processes.spawn(
            [sys.executable, "-m", "kiq.workers"], env=env, die_with_parent=True
        )
        log.info("read worker started index=%d pid=%d", index, self._procs[index].pid)

    async def _keep(self) -> None:
        while not self._stopping:
            await asyncio.sleep(RESPAWN_DELAY_S)
            for index, proc in list(self._procs.items()):
                code = proc.poll()
                if code is not None and not self._stopping:
                    log.warning(
                        "read worker exited index=%d pid=%d code=%s: starting it again",
                        index,
                        proc.pid,
                        code,
                    )
                    self._spawn(index)

    def stop(self) -> None:
        """SIGTERM to each (they finish their open requests), then wait, then SIGKILL."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        for proc in self._procs.values():
            processes.send(proc, signal.SIGTERM)

    def wait(self, timeout_s: float = 20.0) -> None:
        for proc in self._procs.values():
            if processes.wait_or_kill(proc, timeout_s, kill_wait_s=5):
                log.warning("read worker pid=%d did not stop: killed it", proc.pid)

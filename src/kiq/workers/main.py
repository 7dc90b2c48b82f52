"""One read worker's process (``python -m kiq.workers``), started by its node.

It loads the node's settings from its environment, as a child kiq command does, follows
its node (``mirror.MirrorFollower``) and, once it has the node's first snapshot, serves the
node's port beside it with the node's own API over its copies (``app.WorkerApp``).
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from kiq import settings
from kiq.api.limits import count_node_wide
from kiq.api.node_buckets import BucketTable
from kiq.kafka import KafkaSecurity
from kiq.logs import setup_logging
from kiq.node_build import LogWriter, app_endpoints, peer_ssl
from kiq.peers.pool import UNIX
from kiq.runtime.signals import STOP_SIGNALS
from kiq.security import security_for
from kiq.security import tls as tls_contexts
from kiq.server import create_app
from kiq.stores import MemoryBudget
from kiq.workers.app import HomeProxy, WorkerApp
from kiq.workers.mirror import MirrorFollower, MirrorNode
from kiq.workers.server import http_server
from kiq.workers.state import STATE_PATH, TOKEN_HEADER, Snapshot, decode, report_of

log = logging.getLogger(__name__)

FIRST_SNAPSHOT_S = 60.0  # how long a new worker waits for its node to answer
POLL_TIMEOUT_S = 5.0  # a poll is held up to a second (workers.home.HOLD_S)


class UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over the Unix socket at ``path``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def socket_of(home: str) -> str:
    """The path of the node's socket, from its ``unix:PATH`` (``Home.url``)."""
    if not home.startswith(UNIX):
        raise ValueError(f"KIQ_WORKER_HOME={home!r} is not unix:PATH: start it from kiq serve")
    return home[len(UNIX) :]


class StatePoller:
    """The worker's one keep-alive connection to its node's private listener, for polls;
    each carries ``report()``, the worker's counters."""

    def __init__(self, home: str, token: str, report: Callable[[], bytes]) -> None:
        self._report = report
        self._path = socket_of(home)
        self._headers = {TOKEN_HEADER: token}
        self._conn: http.client.HTTPConnection | None = None

    def fetch(self, have_view: int, since: int) -> Snapshot | None:
        if self._conn is None:
            self._conn = UnixConnection(self._path, timeout=POLL_TIMEOUT_S)
        try:
            path = f"{STATE_PATH}?view={have_view}&since={since}"
            self._conn.request("POST", path, body=self._report(), headers=self._headers)
            response = self._conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            return None
        return decode(body) if response.status == 200 else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def main() -> None:
    setup_logging(os.environ.get("KIQ_LOG_LEVEL", "INFO"))
    import uvloop

    uvloop.run(_run())


async def _run() -> None:
    conf = settings.NodeSettings.load(None)
    serve = conf.serve
    index = int(os.environ["KIQ_WORKER_INDEX"])
    home = os.environ["KIQ_WORKER_HOME"]
    token = os.environ["KIQ_WORKER_TOKEN"]
    # Its limits count with the node's other processes (before the app makes its limiters).
    count_node_wide(BucketTable.attach(Path(os.environ["KIQ_WORKER_LIMITS"])))
    loop = asyncio.get_running_loop()
    node = MirrorNode(serve)
    poller = StatePoller(home, token, lambda: report_of(index, os.getpid(), node.metrics))
    stop = asyncio.Event()

    def lost() -> None:
        loop.call_soon_threadsafe(stop.set)

    follower = MirrorFollower(
        node,
        poller.fetch,
        serve.data_dir / "workers" / str(index),
        MemoryBudget.of_mib(serve.store_memory_mb),
        on_lost=lost,
    )
    follower.start()
    if not await asyncio.to_thread(follower.first.wait, FIRST_SNAPSHOT_S):
        log.error("worker=%d had no answer from its node at %s: exiting", index, home)
        follower.stop()
        return
    security = security_for(conf.auth, serve.host)
    writer = LogWriter(serve.bootstrap, KafkaSecurity.from_settings(conf.kafka))
    app = create_app(
        node,
        writer,
        start_node=False,
        endpoints=app_endpoints(conf),
        limits=conf.limits,
        security=security,
        peer_ssl=peer_ssl(conf.tls),
        home=home,
    )
    worker = WorkerApp(app, HomeProxy(socket_of(home), token), index)
    server = http_server(
        worker, serve.host, serve.port, conf.limits, tls_contexts.server_files(conf.tls)
    )

    def shut_down() -> None:
        worker.end_streams()
        server.stop()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    stopping = loop.create_task(stop.wait())
    stopping.add_done_callback(lambda _: shut_down())
    log.info("read worker serving worker=%d node=%s pid=%d", index, serve.node_id, os.getpid())
    try:
        await server.serve()
    finally:
        stopping.cancel()
        follower.stop()
        poller.close()

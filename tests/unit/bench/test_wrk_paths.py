"""wrk thread ``i`` draws its paths from the ``i``-th set: the lookup bench's run with
every node answering keys it owns sends each node only those."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kiq.bench.wrk import run_wrk, write_script

pytestmark = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")


class Recording(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: set[str] = set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recording

    def do_GET(self) -> None:
        self.server.seen.add(self.path)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[list[Recording]]:
    running = [Recording(), Recording()]
    for each in running:
        threading.Thread(target=each.serve_forever, daemon=True).start()
    yield running
    for each in running:
        each.shutdown()
        each.server_close()


def test_each_thread_draws_from_its_targets_own_paths(servers, tmp_path: Path):
    targets = [("127.0.0.1", s.server_address[1]) for s in servers]
    first, second = [f"/a/{i}" for i in range(5)], [f"/b/{i}" for i in range(5)]
    script = write_script(tmp_path, [first, second], targets, count_redirects=False)
    result = run_wrk(script, targets, connections=2, duration_s=1)
    assert result.requests > 0 and result.errors == 0
    assert servers[0].seen == set(first) and servers[1].seen == set(second)


def test_one_set_is_every_threads(servers, tmp_path: Path):
    targets = [("127.0.0.1", s.server_address[1]) for s in servers]
    shared = [f"/c/{i}" for i in range(3)]
    run_wrk(write_script(tmp_path, [shared], targets, False), targets, 2, 1)
    assert servers[0].seen == set(shared) == servers[1].seen

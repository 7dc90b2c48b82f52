"""The floor: what the serving stack alone can do, to put kiq's lookup figures in scale.

A bare ASGI app that answers ``GET /v1/tables/t/keys/{key}`` from a dict, on the
same server stack as ``kiq serve`` (granian's embedded server, ASGI, one runtime
thread, under ``uvloop.run``) and in a process of its own like a node. Nothing
kiq does (routing, stores, headers, metrics) is in the way, so kiq's throughput
divided by the floor's says how much of the budget kiq itself spends.

Run as ``python -m kiq.bench.floor --port P --keys N``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kiq.bench.dataset import TABLE, key_of, quote_bytes
from kiq.errors import KiqError
from kiq.runtime import processes
from kiq.runtime.ports import free_port

PREFIX = f"/v1/tables/{TABLE}/keys/".encode()
_JSON = [(b"content-type", b"application/json")]
# The headers a kiq lookup answers with (docs/guides/endpoints.md), with typical values: the floor
# with these tells the server's cost of kiq's response apart from kiq's own work.
KIQ_HEADERS = [
    *_JSON,
    (b"x-kiq-partition", b"3"),
    (b"x-kiq-served-by", b"n1"),
    (b"x-kiq-lag", b"0"),
    (b"x-kiq-offset", b"123456"),
    (b"x-kiq-version", b"v1"),
]
_MISSING = b'{"error":"not_found"}'


def make_app(values: dict[bytes, bytes], headers: list[tuple[bytes, bytes]] = _JSON) -> Any:
    """The ASGI app: the stored value, 404 for an unknown key; 200 on any other path."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # startup: nothing to set up
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        status, body = 200, b"{}"
        if raw.startswith(PREFIX):
            value = values.get(raw[len(PREFIX) :])
            status, body = (200, value) if value is not None else (404, _MISSING)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


async def _serve(app: Any, port: int) -> None:
    from granian.constants import Interfaces
    from granian.server.embed import Server

    logging.getLogger("granian").setLevel(logging.ERROR)
    server = Server(
        app,
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        log_enabled=False,
        backlog=2048,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    await server.serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kiq.bench.floor", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True, help="serve keys 0..N-1")
    parser.add_argument(
        "--kiq-headers", action="store_true", help="answer with the headers a kiq lookup has"
    )
    args = parser.parse_args(argv)
    values = {key_of(i).encode(): quote_bytes(key_of(i)) for i in range(args.keys)}
    import uvloop

    headers = KIQ_HEADERS if args.kiq_headers else _JSON
    uvloop.run(_serve(make_app(values, headers), args.port))


class LocalFloor:
    """The floor as a subprocess on a free loopback port; ``stop`` is a SIGTERM."""

    def __init__(self, keys: int, log_file: Path, kiq_headers: bool = False) -> None:
        self.keys = keys
        self.log_file = log_file
        self.kiq_headers = kiq_headers
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> LocalFloor:
        cmd = [sys.executable, "-m", "kiq.bench.floor"]
        cmd += ["--port", str(self.port), "--keys", str(self.keys)]
        if self.kiq_headers:
            cmd.append("--kiq-headers")
        self.proc = processes.spawn(cmd, log_file=self.log_file)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KiqError(f"the floor exited ({self.proc.returncode}); see {self.log_file}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/health/ready", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise KiqError(f"the floor did not answer within {timeout_s:.0f}s; see {self.log_file}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc, grace_s=10)


if __name__ == "__main__":
    main()

"""What the server alone costs a watch event: the floor under ``kiq bench watch``'s CPU figure.

A bare app on granian (as a node serves: embedded server, one runtime thread, uvloop)
holds ``--streams`` Server-Sent Events streams; a task in it gives a random stream an
event ``--rate`` times a second, each stream's writer waiting for its next one on a bare
future with a 15 s heartbeat, as kiq's do. No store, no Kafka, no routing. It prints the
server process's CPU per event over ``--duration`` seconds, and the delivery p50/p99.

``--every-ms`` hands the events over that many milliseconds' worth at a time (0: each as
it comes), which is what ``kiq.live.deliveries`` does for a node; ``--interface rsgi``
serves the same over granian's RSGI instead of ASGI.

    PYTHONPATH=src .venv/bin/python scripts/bench_sse_floor.py [--streams 10000]
        [--rate 1000] [--duration 20] [--every-ms 0] [--interface asgi]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import random
import subprocess
import sys
import time
from typing import Any

import aiohttp
import orjson

from kiq.bench.stats import cpu_seconds, percentile
from kiq.runtime.ports import free_port

HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
HEARTBEAT_S = 15.0
SNAPSHOT = b'data: {"snapshot": true}\n\n'


def serve(port: int, streams: int, rate: float, every_s: float, interface: str) -> None:
    import uvloop
    from granian.constants import Interfaces
    from granian.server.embed import Server

    logging.getLogger("granian").setLevel(logging.ERROR)
    waiting: dict[int, asyncio.Future[None]] = {}
    pending: dict[int, bytes] = {}
    started: list[bool] = []

    async def events() -> None:
        rng = random.Random(1)
        start, n = time.monotonic(), 0
        while True:
            due = start + n / rate
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(max(due - now, every_s))
                continue
            i = rng.randrange(streams)
            pending[i] = b'data: {"t": %f}\n\n' % time.time()
            waiter = waiting.get(i)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            n += 1

    async def next_body(i: int) -> bytes:
        if not started:
            started.append(True)
            asyncio.get_running_loop().create_task(events())
        if i not in pending:
            loop = asyncio.get_running_loop()
            waiter = waiting[i] = loop.create_future()
            timer = loop.call_later(HEARTBEAT_S, lambda: waiter.done() or waiter.set_result(None))
            await waiter
            timer.cancel()
        return pending.pop(i, b": hb\n\n")

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        i = int(scope["path"].rsplit("/", 1)[1])
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": SNAPSHOT, "more_body": True})
        while True:
            body = await next_body(i)
            await send({"type": "http.response.body", "body": body, "more_body": True})

    class Rsgi:
        async def __rsgi__(self, scope: Any, proto: Any) -> None:
            i = int(scope.path.rsplit("/", 1)[1])
            headers = [(k.decode(), v.decode()) for k, v in HEADERS]
            transport = proto.response_stream(200, headers)
            await transport.send_bytes(SNAPSHOT)
            while True:
                await transport.send_bytes(await next_body(i))

    async def main() -> None:
        server = Server(
            asgi if interface == "asgi" else Rsgi(),
            address="127.0.0.1",
            port=port,
            interface=Interfaces.ASGI if interface == "asgi" else Interfaces.RSGI,
            log_enabled=False,
            backlog=4096,
            backpressure=streams + 1024,
        )
        await server.serve()

    uvloop.run(main())


async def measure(port: int, pid: int, streams: int, duration_s: float) -> dict[str, float]:
    delays: list[float] = []
    opened = asyncio.Event()
    snapshots = 0
    gate = asyncio.Semaphore(200)

    async def subscriber(i: int, session: aiohttp.ClientSession) -> None:
        nonlocal snapshots
        async with gate:
            resp = await session.get(f"http://127.0.0.1:{port}/w/{i}")
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            event = orjson.loads(line[6:])
            if "snapshot" in event:
                snapshots += 1
                if snapshots == streams:
                    opened.set()
            else:
                delays.append(time.time() - event["t"])

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(subscriber(i, session)) for i in range(streams)]
        await asyncio.wait_for(opened.wait(), 300)
        gc.collect()
        gc.freeze()
        before, first = cpu_seconds([pid]), len(delays)
        started = time.monotonic()
        await asyncio.sleep(duration_s)
        after, last = cpu_seconds([pid]), len(delays)
        took = time.monotonic() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if before is None or after is None:
        raise SystemExit("the server's CPU could not be read from /proc")
    events = max(last - first, 1)
    ms = [d * 1000 for d in delays[first:last]]
    return {
        "events": events,
        "server_cores": round((after - before) / took, 3),
        "server_cpu_us_per_event": round((after - before) / events * 1e6, 1),
        "delivery_p50_ms": round(percentile(ms, 50), 2),
        "delivery_p99_ms": round(percentile(ms, 99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1_000.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--every-ms", type=float, default=0.0)
    parser.add_argument("--interface", choices=("asgi", "rsgi"), default="asgi")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args()
    every_s = args.every_ms / 1000
    if args.serve:
        serve(args.serve, args.streams, args.rate, every_s, args.interface)
        return
    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port)]
    command += ["--streams", str(args.streams), "--rate", str(args.rate)]
    command += ["--every-ms", str(args.every_ms), "--interface", args.interface]
    server = subprocess.Popen(command)
    try:
        time.sleep(2)
        figures = asyncio.run(measure(port, server.pid, args.streams, args.duration))
    finally:
        server.terminate()
        server.wait(10)
    print(orjson.dumps({**vars(args), **figures}, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()

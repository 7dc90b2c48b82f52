"""Free loopback ports for tests, benchmarks and the demo, and the check a node makes
before it listens.

A port the OS hands out for ``bind(0)`` comes from the same range it takes the source
port of every outgoing connection from. Between choosing such a port and binding it,
a Kafka client or a Spark task connecting somewhere can take it, and the process that
was meant to listen there fails with "address in use". So ports are chosen below that
range, where only listeners go.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below this, well-known and registered service ports crowd together.
_LOWEST = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 200


def _listeners_only() -> range | None:
    """Ports below the kernel's ephemeral range, or None where it is not known."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST, low) if low - _LOWEST >= 1_000 else None


def _bound(host: str, port: int) -> socket.socket | None:
    """A socket bound to ``host:port``, or None when the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    return sock


def free_ports(count: int, host: str = "127.0.0.1", consecutive: bool = False) -> list[int]:
    """``count`` distinct ports free on ``host`` a moment ago, all held together while
    chosen; with ``consecutive``, a run of them (``kiq up`` gives node i port + i)."""
    span = _listeners_only()
    if span is None:
        if consecutive:
            return _os_run(count, host)
        return _os_ports(count, host)
    held: list[socket.socket] = []
    try:
        for _ in range(_TRIES):
            if consecutive:
                base = random.randrange(span.start, span.stop - count)
                run = [_bound(host, base + i) for i in range(count)]
                held.extend(each for each in run if each is not None)
                if len(held) == count:
                    return [base + i for i in range(count)]
                for each in held:
                    each.close()
                held.clear()
                continue
            port = random.choice(span)
            sock = _bound(host, port)
            if sock is not None:
                held.append(sock)
                if len(held) == count:
                    return [s.getsockname()[1] for s in held]
        raise OSError(f"no {count} free ports on {host} below the ephemeral range")
    finally:
        for sock in held:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    return free_ports(1, host)[0]


def _os_ports(count: int, host: str) -> list[int]:
    """``count`` ports the OS picks, where its ephemeral range is not known."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _os_run(count: int, host: str) -> list[int]:
    """A run of ``count`` ports starting at one the OS picks."""
    for _ in range(_TRIES):
        (base,) = _os_ports(1, host)
        rest = [_bound(host, base + i) for i in range(1, count)]
        for each in rest:
            if each is not None:
                each.close()
        if all(rest):
            return [base + i for i in range(count)]
    raise OSError(f"no run of {count} free ports on {host}")


def port_taken(host: str, port: int) -> bool:
    """Whether another socket holds ``host:port``, so that listening there would fail
    (as a server does, with SO_REUSEADDR: a port in TIME_WAIT is not taken)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            return True
    return False

"""Random transfers for the bank, produced to a broker on this machine at a given rate."""

from __future__ import annotations

import ipaddress
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Producer

from kiq.kafka import producer_config

ACCOUNTS = 1_000
MAX_AMOUNT = 100


def account(i: int) -> str:
    """Account ``i``'s id: ``a0042``."""
    return f"a{i:04d}"


@dataclass(frozen=True)
class Transfer:
    source: str
    target: str
    amount: int

    def value(self) -> bytes:
        return json.dumps({"from": self.source, "to": self.target, "amount": self.amount}).encode()


def transfers(rng: random.Random, accounts: int = ACCOUNTS) -> Iterator[Transfer]:
    """Endless transfers of 1..MAX_AMOUNT between two distinct random accounts."""
    while True:
        a, b = rng.sample(range(accounts), 2)
        yield Transfer(account(a), account(b), rng.randint(1, MAX_AMOUNT))


def balances(sent: list[Transfer]) -> dict[str, int]:
    """What the table holds once every transfer in ``sent`` is applied (accounts touched)."""
    out: dict[str, int] = {}
    for t in sent:
        out[t.source] = out.get(t.source, 0) - t.amount
        out[t.target] = out.get(t.target, 0) + t.amount
    return out


def _loopback(bootstrap: str) -> None:
    for server in bootstrap.split(","):
        host = server.rsplit(":", 1)[0].strip("[]")
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the bank feed writes to a broker on this machine, not {server}")


def feed(
    bootstrap: str,
    topic: str = "transfers",
    *,
    count: int,
    rate: float = 200.0,
    max_seconds: float = 120.0,
    seed: int = 40,
    accounts: int = ACCOUNTS,
) -> list[Transfer]:
    """Produce up to ``count`` random transfers among ``accounts`` to ``topic`` at about
    ``rate`` a second, for at most ``max_seconds``; returns those the broker acknowledged
    (keyed by the debited account), in the order produced."""
    _loopback(bootstrap)
    producer = Producer(producer_config(bootstrap))
    rng = random.Random(seed)
    sent: list[Transfer] = []
    failed: list[str] = []
    start = time.monotonic()

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    for i, t in zip(range(count), transfers(rng, accounts), strict=False):
        due = start + i / rate
        now = time.monotonic()
        if now - start > max_seconds:
            break
        if due > now:
            time.sleep(due - now)
        while True:
            try:
                producer.produce(
                    topic, key=t.source.encode(), value=t.value(), on_delivery=delivered
                )
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)
        producer.poll(0)
        sent.append(t)
    left = producer.flush(30)
    if left or failed:
        raise RuntimeError(f"{left} transfers not acknowledged, {len(failed)} failed: {failed[:1]}")
    return sent

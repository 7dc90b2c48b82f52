"""A kiq command started the moment a broker comes back rides out "not leader" and ends
without a traceback (issue 38: `kiq up` crashed in its catalog read at a restart).

A broker answers metadata requests as soon as it listens, but takes a few seconds to
take the leadership of each partition it holds; until then offsets asked of it get
NOT_LEADER_FOR_PARTITION. With a few hundred partitions the window is seconds long, so
a read made at once meets it every time. Each test has a broker of its own (the shared
one is never restarted).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.catalog import CATALOG_TOPIC
from kiq.cli.context import run_or_exit
from kiq.kafka import compacted, create_topics
from kiq.runtime.broker import LocalBroker
from kiq.runtime.ports import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Partitions whose leadership the broker takes back before the catalog's is sure to be
# answered: 30 topics of 12 (a window of about 4 s here).
BUSY_TOPICS = {f"busy-{i}": 12 for i in range(30)}
NOT_YET = ("error=NOT_LEADER_FOR_PARTITION", "error=LEADER_NOT_AVAILABLE")


@pytest.fixture
def busy_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of the test's own holding a catalog record and 360 partitions."""
    broker = LocalBroker.on_free_ports(tmp_path / "broker")
    try:
        broker.start()
        compacted.ensure(broker.bootstrap, CATALOG_TOPIC)
        compacted.put(broker.bootstrap, CATALOG_TOPIC, {"restart-probe": b"{}"})
        create_topics(broker.bootstrap, BUSY_TOPICS)
        yield broker
    finally:
        broker.stop()


def listening(bootstrap: str) -> bool:
    """Whether the broker accepts connections (before it leads anything)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def starting(broker: LocalBroker) -> Iterator[threading.Thread]:
    """``broker`` starting on a thread of its own; its start is waited for on the way out."""
    thread = threading.Thread(target=broker.start, name="broker-start")
    thread.start()
    try:
        yield thread
    finally:
        thread.join(180)


@pytest.fixture
def restarted(busy_broker: LocalBroker) -> Iterator[LocalBroker]:
    """``busy_broker`` stopped and started again, handed over the moment it listens
    (before it leads its partitions)."""
    busy_broker.stop()
    with starting(busy_broker) as thread:
        deadline = time.monotonic() + 120
        while not listening(busy_broker.bootstrap):
            assert thread.is_alive() and time.monotonic() < deadline, "broker did not restart"
            time.sleep(0.01)
        yield busy_broker


def test_the_catalog_read_rides_out_a_restart(
    restarted: LocalBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """What `kiq up` reads the catalog with, right after the restart: the record, after
    retries each logged on one line."""
    with caplog.at_level(logging.WARNING, logger="kiq.kafka.retry"):
        found = run_or_exit(
            lambda: compacted.read_latest(
                restarted.bootstrap, CATALOG_TOPIC, security=restarted.security
            )
        )
    assert found == {"restart-probe": b"{}"}
    retried = [r.getMessage() for r in caplog.records if "kafka call retried" in r.getMessage()]
    assert retried, "the read met no partition without its leader: the test proved nothing"
    assert any(e in line for line in retried for e in NOT_YET), retried
    assert f"bootstrap={restarted.bootstrap}" in retried[0]


def test_kiq_up_started_during_a_restart_shows_no_traceback(
    busy_broker: LocalBroker, tmp_path: Path
) -> None:
    """`kiq up` on that broker, started while it is down: it waits for it, creates its
    topic, reads the catalog while the broker takes its partitions back, and serves;
    Ctrl-C ends it cleanly. (Its requests wait in the client while the broker is down and
    land after the not-leader window here, so this one need not retry: it guards the
    whole command across a restart, the test above the retry itself.)"""
    port = free_ports(1)[0]
    config = tmp_path / "kiq.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [app]
            name = "restart"
            nodes = 1
            port = {port}
            home = "{tmp_path}/home"
            topics = {{ "colors" = 3 }}

            [serve]
            cluster = "restart"
            tables = ["colors=colors"]
            """
        )
    )
    argv = [sys.executable, "-m", "kiq", "up", "--config", str(config)]
    argv += ["--bootstrap", busy_broker.bootstrap]
    log = tmp_path / "up.log"
    busy_broker.stop()
    with log.open("wb") as out:
        up = subprocess.Popen(
            argv,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # the test's signals reach kiq up and its node only
        )
    try:
        time.sleep(3)  # kiq up is asking the broker that is not there
        assert up.poll() is None, log.read_text()
        with starting(busy_broker):
            deadline = time.monotonic() + 180
            while "serving nodes:" not in log.read_text():
                assert up.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        os.killpg(up.pid, signal.SIGINT)
        code = up.wait(120)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(30)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text and "error:" not in text, text
    assert "serving nodes:" in text and "restart stopped" in text, text

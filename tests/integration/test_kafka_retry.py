"""A Kafka call a command makes once rides a broker restart: no traceback, the read done.

The crash this guards against (`kiq up` at a restart: ``KafkaException:
NOT_LEADER_FOR_PARTITION ... Failed to get watermark offsets`` in its catalog read)
came in the moment after a broker started, before its partitions had leaders; that
moment is too short to hit on purpose. So the catalog is read, as a command of its own,
while a broker of this test's is down, and the broker started meanwhile: the read meets
the outage, then the restart, and must end with the catalog and no traceback, having
said that it retried. The old code raised out of the first failed request.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.catalog import CATALOG_TOPIC
from kiq.kafka import compacted
from kiq.runtime.broker import LocalBroker

pytestmark = pytest.mark.integration

# What `kiq up` does to learn the tables (``Running._catalog``), with kiq's CLI logging.
READ_CATALOG = """
import sys
from kiq.logs import setup_logging
from kiq.kafka import compacted
setup_logging("INFO")
print("keys:", sorted(compacted.read_latest(sys.argv[1], sys.argv[2])))
"""


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own, to stop and start (never the suite's shared one)."""
    local = LocalBroker.on_free_ports(tmp_path / "broker")
    try:
        local.start()
        yield local
    finally:
        local.stop()


def test_the_catalog_read_rides_a_broker_restart(own_broker: LocalBroker) -> None:
    bootstrap = own_broker.bootstrap
    compacted.ensure(bootstrap, CATALOG_TOPIC)
    compacted.put(bootstrap, CATALOG_TOPIC, {"app/t1": b"1", "app/t2": b"2"})
    own_broker.stop()

    reader = subprocess.Popen(
        [sys.executable, "-c", READ_CATALOG, bootstrap, CATALOG_TOPIC],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err_lines: list[str] = []
    retried = threading.Event()

    def drain() -> None:
        assert reader.stderr is not None
        for line in reader.stderr:
            err_lines.append(line)
            if "kafka call retried" in line:
                retried.set()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        # The reader meets the stopped broker (and, before the fix, died of it).
        deadline = time.monotonic() + 60
        while not retried.wait(0.2) and reader.poll() is None and time.monotonic() < deadline:
            pass
        assert retried.is_set(), "".join(err_lines)
        started = time.monotonic()
        own_broker.start()
        out, _ = reader.communicate(timeout=90)
        drainer.join(10)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    err = "".join(err_lines)
    assert reader.returncode == 0, err
    assert "Traceback" not in out + err
    assert "keys: ['app/t1', 'app/t2']" in out
    retries = [line for line in err_lines if "kafka call retried" in line]
    assert "what=\"read topic 'kiq-catalog'\"" in retries[0]
    print(f"retried {len(retries)}x; read {time.monotonic() - started:.1f}s after restart began")
    print("".join(retries))

"""Real components for integration tests: a Kafka broker and a Spark session.

Both start once per test session on free loopback ports, in temporary
directories, through the same code `kiq broker` and `kiq pipeline` use, and stop
at the end. Nothing here is mocked.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiq.kafka import create_topics
from kiq.runtime.broker import LocalBroker
from kiq.settings import SparkSettings


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    local = LocalBroker.on_free_ports(tmp_path_factory.mktemp("broker"))
    local.start()
    yield local
    local.stop()


@pytest.fixture(scope="session")
def bootstrap(broker: LocalBroker) -> str:
    return broker.bootstrap


@pytest.fixture
def own_bootstrap(tmp_path: Path) -> Iterator[str]:
    """A broker of the test's own, for pipelines whose topics have fixed names."""
    local = LocalBroker.on_free_ports(tmp_path / "broker")
    local.start()
    yield local.bootstrap
    local.stop()


_topic_ids = itertools.count()


@pytest.fixture
def make_topic(bootstrap: str) -> Callable[..., str]:
    """Create a fresh, uniquely named topic with the given partition count."""

    def make(prefix: str = "t", partitions: int = 1, **config: str) -> str:
        name = f"{prefix}-{next(_topic_ids)}-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, {name: partitions}, config=config)
        return name

    return make


@pytest.fixture(scope="session")
def spark_settings(tmp_path_factory: pytest.TempPathFactory) -> SparkSettings:
    return SparkSettings(
        master="local[2]",
        app_name="kiq-tests",
        checkpoint_dir=tmp_path_factory.mktemp("checkpoints"),
        shuffle_partitions=4,
    )


@pytest.fixture(scope="session")
def spark(spark_settings: SparkSettings):  # -> SparkSession (pyspark imported lazily)
    from kiq.pipelines import build_session

    session = build_session(spark_settings)
    yield session
    session.stop()


@pytest.fixture
def checkpoint(spark_settings: SparkSettings, request: pytest.FixtureRequest) -> str:
    """A checkpoint directory of its own for each test's streaming query."""
    path = Path(spark_settings.checkpoint_dir) / f"{request.node.name}-{uuid.uuid4().hex[:6]}"
    return str(path)

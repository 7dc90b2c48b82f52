"""`kiq topics list|delete` against a real broker: what a topic holds, and a deletion that
happens only once confirmed."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from typer.testing import CliRunner

from kiq.catalog import CATALOG_TOPIC
from kiq.cli.main import app
from kiq.kafka import compacted, topic_partitions
from kiq.tables.declared import Declared
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture
def declared(bootstrap: str, make_topic: Callable[..., str]) -> Iterator[Declared]:
    """A table of an application of its own in the catalog, on a topic with 3 records."""
    topic = make_topic("topics-cli", partitions=3)
    produce(bootstrap, topic, [("a", "{}"), ("b", "{}"), ("c", "{}")])
    table = Declared(table="views", topic=topic, key=("k",), app=f"t{uuid.uuid4().hex[:8]}")
    compacted.ensure(bootstrap, CATALOG_TOPIC)
    compacted.put(bootstrap, CATALOG_TOPIC, {table.catalog_key: table.encode()})
    yield table
    compacted.put(bootstrap, CATALOG_TOPIC, {table.catalog_key: None})


def topics(*args: str, input: str | None = None):  # -> click.testing.Result
    return runner.invoke(app, ["topics", *args], input=input)


def test_list_shows_partitions_records_and_the_table_a_topic_holds(
    bootstrap: str, declared: Declared
):
    result = topics("list", "--bootstrap", bootstrap)
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if row.startswith(declared.topic))
    assert line.split()[1:3] == ["3", "3"], line
    assert f"table {declared.app}/views" in line
    assert "__consumer_offsets" not in result.output  # Kafka's own, hidden ...
    shown = topics("list", "--bootstrap", bootstrap, "--all")
    assert "__consumer_offsets" in shown.output  # ... unless asked for


def test_delete_asks_first_and_a_no_keeps_the_topic(bootstrap: str, declared: Declared):
    result = topics("delete", declared.topic, "--bootstrap", bootstrap, input="n\n")
    assert result.exit_code == 1, result.output
    assert f"{declared.topic}: 3 partitions, 3 records" in result.output
    assert f"table {declared.app}/views" in result.output
    assert "nothing deleted" in result.output
    assert topic_partitions(bootstrap, declared.topic) == 3

    result = topics("delete", declared.topic, "--bootstrap", bootstrap, input="y\n")
    assert result.exit_code == 0, result.output
    assert topic_partitions(bootstrap, declared.topic) is None


def test_delete_yes_deletes_without_asking(bootstrap: str, make_topic: Callable[..., str]):
    topic = make_topic("topics-cli-yes", partitions=2)
    result = topics("delete", topic, "--yes", "--bootstrap", bootstrap)  # no input: no prompt
    assert result.exit_code == 0, result.output
    assert f"deleted topic {topic}" in result.output
    assert topic_partitions(bootstrap, topic) is None


def test_delete_refuses_kiqs_own_topics_and_unknown_ones(bootstrap: str):
    compacted.ensure(bootstrap, CATALOG_TOPIC)
    result = topics("delete", CATALOG_TOPIC, "--yes", "--bootstrap", bootstrap)
    assert result.exit_code == 1 and "--internal" in result.output, result.output
    assert topic_partitions(bootstrap, CATALOG_TOPIC) == 1
    missing = f"no-such-{uuid.uuid4().hex[:6]}"
    result = topics("delete", missing, "--yes", "--bootstrap", bootstrap)
    assert result.exit_code == 1 and f"no topic {missing}" in result.output, result.output

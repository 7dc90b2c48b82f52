"""Pipeline options that decide how much fixed work each micro-batch costs."""

from __future__ import annotations

from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.runner import stale_state_hint
from kiq.settings import SparkSettings


def test_one_input_task_per_batch_on_a_local_master_only():
    assert SparkSettings(master="local[2]").input_tasks_per_batch == 1
    assert SparkSettings(master="spark://h:7077").input_tasks_per_batch is None
    assert SparkSettings(master="local[2]", input_tasks=4).input_tasks_per_batch == 4
    assert SparkSettings(master="spark://h:7077", input_tasks=8).input_tasks_per_batch == 8


def test_reads_never_wait_on_the_brokers_fetch_timeout():
    opts = StreamOptions(bootstrap="b:9092", checkpoint_root="/tmp/cp")
    assert opts.fetch_max_wait_ms == 0
    assert opts.input_tasks is None


def test_a_checkpoint_from_another_version_of_the_query_says_what_to_do():
    error = "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] The provided value schema does not match"
    hint = stale_state_hint(error, "/var/kiq/checkpoints")
    assert "/var/kiq/checkpoints" in hint and "delete" in hint
    assert stale_state_hint("[KAFKA] broker went away", "/var/kiq/checkpoints") == ""

"""What kiq reads off a streaming DataFrame's plan before starting its query: which
reads it comes from, whether it keeps state, whether it joins two streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Logical operators that keep state across micro-batches (a stateful query needs its
# shuffle partitions' task slots in Real-Time Mode).
STATEFUL = frozenset(
    {
        "Aggregate",
        "Deduplicate",
        "DeduplicateWithinWatermark",
        "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState",
        "TransformWithState",
        "TransformWithStateInPandas",
        "TransformWithStateInPySpark",
        "GlobalLimit",
    }
)


def _nodes(plan: Any) -> Iterator[Any]:
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))


def source_ids(df: DataFrame) -> frozenset[str]:
    """One id per read the DataFrame comes from: its leaves' output attributes, whose
    expression ids are unique to one ``readStream...load()`` (or to the batch frame
    ``kiq.testing`` reads instead, hence every leaf, not only streaming ones; a static
    side's leaf matches no read). The analyzed plan: a fresh read's logical plan is an
    unresolved source, resolved once, when first used."""
    plan = df._jdf.queryExecution().analyzed()
    return frozenset(n.output().mkString(",") for n in _nodes(plan) if n.children().size() == 0)


def _joins_streams(node: Any) -> bool:
    if node.nodeName() != "Join":
        return False
    children = node.children()
    return bool(children.apply(0).isStreaming() and children.apply(1).isStreaming())


def stateful(df: DataFrame) -> bool:
    """Whether the query keeps state (an aggregation, deduplication, a stream-stream join)."""
    plan = df._jdf.queryExecution().analyzed()
    return any(n.nodeName() in STATEFUL or _joins_streams(n) for n in _nodes(plan))


def streams_joined(df: DataFrame) -> bool:
    """Whether the query joins two streams: Spark then allows the append mode only."""
    return any(_joins_streams(n) for n in _nodes(df._jdf.queryExecution().analyzed()))


# Logical operators (as analyzed) whose physical operators Spark 4.3 runs in Real-Time
# Mode; anything else stops a query there. Python UDFs are not seen here (the optimizer,
# which a streaming plan cannot go through before it starts, makes them operators): Spark
# fails such a query once it runs, and the runner's error says to use micro-batches.
REALTIME_OPERATORS = frozenset(
    {
        "Project",
        "Filter",
        "Generate",
        "Expand",
        "Union",
        "Aggregate",
        "Deduplicate",
        "EventTimeWatermark",
        "UpdateEventTimeWatermarkColumn",
        "TransformWithState",
        "SubqueryAlias",
        "StreamingRelationV2",
        "StreamingRelation",
        "StreamingExecutionRelation",
        "LocalRelation",
        "LogicalRelation",
        "Range",
        "Join",
        "ResolvedHint",
        "AppendColumns",
        "MapElements",
        "MapPartitions",
        "SerializeFromObject",
        "DeserializeToObject",
        "CollectMetrics",
    }
)


def realtime_blockers(df: DataFrame) -> list[str]:
    """What in the query Spark would refuse in Real-Time Mode (empty: nothing known).

    Spark checks its own list only once the query runs, and fails it then; kiq checks
    first, so that ``auto`` can choose micro-batches instead."""
    # One walk of the plan: each step down it is a call into the JVM.
    nodes = list(_nodes(df._jdf.queryExecution().analyzed()))
    names = [n.nodeName() for n in nodes]
    found = {name for name in names if name not in REALTIME_OPERATORS}
    joins = [n for n, name in zip(nodes, names, strict=True) if name == "Join"]
    if any(_joins_streams(n) for n in joins):
        found.add("a join of two streams")
    if any(_static_side_too_big(df, n) for n in joins):
        found.add("a join with a static side it does not broadcast (a sort-merge join)")
    return sorted(found)


def _static_side_too_big(df: DataFrame, node: Any) -> bool:
    """A join of a stream with a static side Spark would not broadcast: it plans a sort-merge
    join, which Real-Time Mode refuses. Spark broadcasts a side with a broadcast hint or
    estimated under ``spark.sql.autoBroadcastJoinThreshold``; a Kafka batch read has no
    estimate, so it is never broadcast unhinted."""
    left, right = node.children().apply(0), node.children().apply(1)
    if left.isStreaming() == right.isStreaming():
        return False
    static = right if left.isStreaming() else left
    if "broadcast" in node.hint().toString().lower() or any(
        n.nodeName() == "ResolvedHint" and "broadcast" in n.toString().lower()
        for n in _nodes(static)
    ):
        return False
    session = df.sparkSession._jsparkSession
    jvm = df.sparkSession._jvm
    assert jvm is not None
    frame = jvm.org.apache.spark.sql.classic.Dataset.ofRows(session, static)
    size = int(str(frame.queryExecution().optimizedPlan().stats().sizeInBytes()))
    threshold = int(session.sessionState().conf().autoBroadcastJoinThreshold())
    return threshold < 0 or size > threshold

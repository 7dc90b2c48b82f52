"""Which topics retiring a table version may delete: only those kiq derives for that version.

A declaration in the table catalog is written by whoever may write the catalog, so its
``topic`` and ``dead_letters`` are claims, not facts. ``kiq retire`` deletes a topic only
when kiq itself would have named it so for the version retired (``TOPIC.V`` for a version
V other than v1, its dead letters ``NAME.V``; for v1, the topic as declared and dead
letters ``NAME-dlq``), and no one else uses it: no other declaration in the catalog (another
version, table or application) names it as its topic or its dead letters, no other table
the node serves reads it, no query reads it as an input, and it is not one of Kafka's or
kiq's own topics. Every other topic is kept, with the reason, for the operator to read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from kiq.catalog import CATALOG_TOPIC, DEAD_LETTERS, PROGRESS_TOPIC
from kiq.tables.versions import DEFAULT_VERSION, run_name, versioned_topic

# Kafka's own rule for topic names (kiq.tables.spec checks a served table's the same way).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_TABLE = "table:"
# Topics no retire deletes, whatever a record says: the catalog, the pipelines' progress and
# the nodes' dead letters; names starting with "__" are Kafka's own (__consumer_offsets).
RESERVED = frozenset({CATALOG_TOPIC, PROGRESS_TOPIC, DEAD_LETTERS})
# How Spark describes a Kafka source in a query's progress: KafkaV2[Subscribe[a,b]].
_SUBSCRIBED = re.compile(r"Subscribe\[([^\]]*)\]")


@dataclass(frozen=True)
class Kept:
    """A topic a retire named but did not delete, and why."""

    topic: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"topic": self.topic, "reason": self.reason}


@dataclass(frozen=True)
class RetireTopics:
    """What a retire deletes and what it keeps (each topic once, in the order found)."""

    delete: tuple[str, ...]
    kept: tuple[Kept, ...]


class _Names(msgspec.Struct):
    """The names any table declaration holds, read leniently: a record that a strict read
    refuses (a newer kiq's, a hand-written one) still protects the topics it names."""

    topic: Any = None
    dead_letters: Any = None
    version: Any = DEFAULT_VERSION
    app: Any = "kiq"
    pipeline: Any = ""
    checkpoint: Any = ""


def dead_letters_default(topic: str, version: str) -> str:
    """Where ``ctx.write_table`` sends a version's dead letters unless told otherwise:
    ``TOPIC-dlq``, ``TOPIC-dlq.V`` for a version V other than v1 (``topic`` being
    ``TOPIC.V``: kiq.pipelines.context)."""
    if version == DEFAULT_VERSION:
        return f"{topic}-dlq"
    return versioned_topic(f"{topic.removesuffix(f'.{version}')}-dlq", version)


def retire_topics(
    *,
    key: str,
    topic: str,
    version: str,
    dead_letters: Iterable[str],
    catalog: Mapping[str, bytes],
    served: Mapping[str, str] | None = None,
    inputs: Iterable[str] = (),
) -> RetireTopics:
    """The topics retiring the version declared under catalog key ``key`` deletes.

    ``topic`` and ``dead_letters`` are its declaration's (none recorded: the default dead
    letters); ``catalog`` is the catalog's latest record by key, every application's (the
    version's own record, ``key``, is left out); ``served`` the topics the node serves by
    table (the version's own left out by the caller); ``inputs`` the topics queries read."""
    used = _used_by_others(key, catalog)
    for name, their_topic in (served or {}).items():
        used.setdefault(their_topic, f"table {name} on this node serves it")
    for source in inputs:
        used.setdefault(source, "a pipeline's query reads it")
    letters = list(dead_letters) or [dead_letters_default(topic, version)]
    candidates = [(topic, _topic_derived(topic, version))]
    candidates += [_letters_derived(d, version) for d in letters]
    delete: list[str] = []
    kept: list[Kept] = []
    seen: set[str] = set()
    for name, not_derived in candidates:
        if name in seen:
            continue
        seen.add(name)
        reason = _refusal(name, not_derived, used)
        if reason is None:
            delete.append(name)
        else:
            kept.append(Kept(name, reason))
    return RetireTopics(tuple(delete), tuple(kept))


def sharing_run(
    *, key: str, app: str, run: str, checkpoint: str, catalog: Mapping[str, bytes]
) -> str | None:
    """The key of another declaration written by pipeline version ``run`` of ``app``, or
    checkpointing at ``checkpoint`` (any application's): while one is left, the run's records
    and its checkpoint stay. None when there is none."""
    for other, names in _declarations(key, catalog):
        if not isinstance(names.pipeline, str) or not isinstance(names.version, str):
            continue
        if names.app == app and run_name(names.pipeline, names.version) == run:
            return other
        if checkpoint and names.checkpoint == checkpoint:
            return other
    return None


def input_topics(queries: Iterable[Mapping[str, object]]) -> set[str]:
    """The Kafka topics the queries' progress says they read (Spark's source descriptions)."""
    found: set[str] = set()
    for q in queries:
        sources = q.get("sources")
        for s in sources if isinstance(sources, list | tuple) else ():
            text = s.get("source") if isinstance(s, Mapping) else s
            for listed in _SUBSCRIBED.findall(str(text)):
                found.update(t.strip() for t in listed.split(",") if t.strip())
    return found


def _refusal(name: str, not_derived: str | None, used: Mapping[str, str]) -> str | None:
    if not _TOPIC.fullmatch(name):
        return "not a valid Kafka topic name"
    if name in RESERVED or name.startswith("__"):
        return "one of Kafka's or kiq's own topics"
    if name in used:
        return used[name]
    return not_derived


def _topic_derived(topic: str, version: str) -> str | None:
    """None when kiq would name version ``version``'s topic ``topic``; else why not."""
    if version == DEFAULT_VERSION:
        return None  # v1 keeps the topic its pipeline names (the checks on use still apply)
    suffix = f".{version}"
    if topic.endswith(suffix) and len(topic) > len(suffix):
        return None
    return f"not a topic kiq derives for {version} (TOPIC{suffix})"


def _letters_derived(letters: str, version: str) -> tuple[str, str | None]:
    """The dead-letter topic version ``version`` writes for a declared ``letters``, and None
    when kiq derives it, else why not. The declaration of a version other than v1 names
    its inputs' dead letters without the version (kiq.pipelines.context records them as
    ``ctx.read`` was given them), while the query writes them with it: ``NAME.V``."""
    if version == DEFAULT_VERSION:
        if letters.endswith("-dlq") and len(letters) > len("-dlq"):
            return letters, None
        return letters, "not a dead-letter topic kiq derives for v1 (NAME-dlq)"
    suffix = f".{version}"
    written = letters if letters.endswith(suffix) else versioned_topic(letters, version)
    return written, None


def _used_by_others(key: str, catalog: Mapping[str, bytes]) -> dict[str, str]:
    """Every topic another table declaration names (as written and as its version writes
    it), with a reason naming the declaration."""
    used: dict[str, str] = {}
    for other, names in _declarations(key, catalog):
        reason = f"the declaration {other} names it"
        version = names.version if isinstance(names.version, str) else DEFAULT_VERSION
        named = [names.topic] if isinstance(names.topic, str) else []
        letters = names.dead_letters
        named += [d for d in letters if isinstance(d, str)] if isinstance(letters, list) else []
        if isinstance(names.topic, str) and not letters:
            named.append(dead_letters_default(names.topic, version))
        for topic in named:
            used.setdefault(topic, reason)
            used.setdefault(versioned_topic(topic, version), reason)
    return used


def _declarations(key: str, catalog: Mapping[str, bytes]) -> Iterator[tuple[str, _Names]]:
    """Every table declaration but ``key``'s, by key, read leniently."""
    for other, value in sorted(catalog.items()):
        if other == key or not other.startswith(_TABLE):
            continue
        try:
            yield other, msgspec.json.decode(value, type=_Names)
        except msgspec.DecodeError:
            continue  # not a JSON object: it names nothing kiq could read

"""Whether a table's new declaration may take over its old one's topic, records and stores.

A table's topic keeps every record its pipeline wrote under the old declaration, and the
nodes serve them as the new one says: a key of another shape is served as if it were of
the new one (``a|b`` read as a window), a number as text. So when a pipeline starts, each
table it declares is compared with the declaration the catalog holds for the same
application, table and version, and an incompatible change is refused before anything is
written (``kiq.pipelines.io``), with the two ways out: a new version beside it, or a reset.

Incompatible, each named ``what: old → new``:

- the key: its columns, their order, the separator of a composite key, or a key column's
  type (the key is the column's text: ``3`` is not ``3.0``); integer widths
  (tinyint, smallint, int, bigint) are one type, as their text is the same;
- the table's kind: plain keys or windowed (``window=``), whose keys end in two times;
- the partitioning: ``key`` or ``input`` (a key's old record may sit in another partition);
- the value: a JSON object or not; a field both have whose type changed (integer widths
  are one type, and so are float, double and decimals: a JSON number either way); a new
  field that may not be null (old records lack it, and a reader would find no value where
  the schema promises one); a value that is not an object whose type changed.

Compatible: a new field that may be null (an old record lacks it, which reads as null), a
field removed (old records keep it, and readers ignore it), the topic, the partition
count (the topic's own is checked where it is created), ttl, retention, rank_by, the
index (the nodes keep it from the records; nothing of it is in them), consistent (a
table without markers answers as one without them always did), the query, the
checkpoint and the dead letters. What either declaration did not record (one written
by an older kiq) is not compared. Neither is a window's length: the declaration holds the
window's column, not its duration, so a change from 1-minute to 5-minute windows is not
seen here; run it as a new version, or reset the table.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from kiq.tables.declared import Declared, ValueField
from kiq.tables.versions import DEFAULT_VERSION, internal_name

_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})
_FRACTIONAL = frozenset({"float", "double"})
_DECIMAL = re.compile(r"decimal\(\d+,\d+\)")
_NUMBERED = re.compile(r"(.*?)(\d+)")


def key_type(kind: str) -> str:
    """A key column's type as its text tells it: integer widths alike."""
    return "integer" if kind in _INTEGRAL else kind


def value_type(kind: str) -> str:
    """A value field's type as its JSON tells it: integer widths alike, and fractions."""
    if kind in _INTEGRAL:
        return "integer"
    if kind in _FRACTIONAL or _DECIMAL.fullmatch(kind):
        return "fraction"
    return kind


def incompatible(old: Declared, new: Declared) -> list[str]:
    """What changed from ``old`` to ``new`` that the old records would be misread by, each
    ``what: old → new``; empty when the new declaration may take over the old one's topic."""
    found: list[str] = []
    if old.key != new.key:
        found.append(f"key: {_key(old)} → {_key(new)}")
    elif len(old.key) > 1 and old.sep != new.sep:
        found.append(f"key separator: {old.sep!r} → {new.sep!r}")
    elif old.key_types and new.key_types:
        for column, was, now in zip(new.key, old.key_types, new.key_types, strict=False):
            if key_type(was) != key_type(now):
                found.append(f"key column {column}: {was} → {now}")
    if (old.window is None) != (new.window is None):
        found.append(f"kind: {_kind(old)} → {_kind(new)}")
    if old.partitioning != new.partitioning:
        found.append(f"partitioning: {old.partitioning} → {new.partitioning}")
    found += _value_changes(old, new)
    return found


def _value_changes(old: Declared, new: Declared) -> list[str]:
    was_object, now_object = old.value_fields is not None, new.value_fields is not None
    was_plain, now_plain = old.value_type is not None, new.value_type is not None
    if not (was_object or was_plain) or not (now_object or now_plain):
        return []  # one side did not record its value's shape
    if was_object != now_object:
        return [f"value: {_value(old)} → {_value(new)}"]
    if was_plain:
        assert old.value_type is not None and new.value_type is not None
        if value_type(old.value_type) != value_type(new.value_type):
            return [f"value: {old.value_type} → {new.value_type}"]
        return []
    assert old.value_fields is not None and new.value_fields is not None
    before = {f.name: f for f in old.value_fields}
    found = []
    for f in new.value_fields:
        was = before.get(f.name)
        if was is None:
            if not f.nullable:
                found.append(f"value field {f.name}: (absent) → {f.type} not null")
        elif value_type(was.type) != value_type(f.type):
            found.append(f"value field {f.name}: {was.type} → {f.type}")
    return found


def compatible_changes(old: Declared, new: Declared) -> list[str]:
    """What else changed that a reader may notice (a topic, a field added or removed), each
    ``what: old → new``, for the log; unrecorded shapes and the checkpoint do not count."""
    found = []
    if old.topic != new.topic:
        found.append(f"topic: {old.topic} → {new.topic}")
    if old.value_fields is not None and new.value_fields is not None:
        before = {f.name for f in old.value_fields}
        after = {f.name for f in new.value_fields}
        found += [f"value field {n}: (absent) → added" for n in sorted(after - before)]
        found += [f"value field {n}: removed" for n in sorted(before - after)]
    changed = ("pipeline", "query", "partitions", "ttl_ms", "retention_ms", "rank_by", "window")
    for what in (*changed, "consistent"):
        was, now = getattr(old, what), getattr(new, what)
        if was != now and not (what == "window" and (was is None or now is None)):
            found.append(f"{what}: {was} → {now}")
    if old.index != new.index:
        found.append(f"index: {_index(old)} → {_index(new)}")
    return found


def refusal(
    old: Declared, new: Declared, changes: Sequence[str], taken: Collection[str] = ()
) -> str:
    """The message that refuses ``new``: the table, what changed, and the two ways out (a
    version none of ``taken``, the table's versions in the catalog, already names)."""
    named = internal_name(new.table, new.version)
    version = "" if new.version == DEFAULT_VERSION else f" --version {new.version}"
    nxt = next_version(new.version, taken)
    return (
        f"table {named} (application {new.app}) changed incompatibly since pipeline "
        f"{old.pipeline or '?'} declared it: {'; '.join(changes)}. Its topic {old.topic} "
        "still holds records of the old shape, which the nodes would serve as the new one, "
        "so nothing was written. Either run the changed pipeline as a new version beside "
        f"it: kiq pipeline run --version {nxt} (under kiq up: [pipeline] version = "
        f'"{nxt}" in the application file, or KIQ_PIPELINE_VERSION={nxt}), then kiq diff, '
        f"kiq switch and kiq retire; or, in development, start the table over: "
        f"kiq topics reset {new.table}{version} (deletes its records, its checkpoint and "
        "its declaration). docs/guides/changing-tables.md walks through both"
    )


def next_version(version: str, taken: Collection[str] = ()) -> str:
    """The version to suggest after ``version``: ``v2`` after ``v1``, ``v10`` after ``v9``
    (the first of them ``taken`` does not hold), else ``NEW`` (a name only the operator
    can choose)."""
    numbered = _NUMBERED.fullmatch(version)
    if numbered is None:
        return "NEW"
    head, n = numbered.group(1), int(numbered.group(2)) + 1
    while f"{head}{n}" in taken:
        n += 1
    return f"{head}{n}"


def _key(d: Declared) -> str:
    return (d.sep or "|").join(d.key) if len(d.key) > 1 else (d.key[0] if d.key else "")


def _kind(d: Declared) -> str:
    return "plain keys" if d.window is None else f"windowed (window={d.window})"


def _value(d: Declared) -> str:
    if d.value_fields is not None:
        return "a JSON object of " + ", ".join(_field(f) for f in d.value_fields)
    return f"{d.value_type} (not a JSON object)"


def _index(d: Declared) -> str:
    return ", ".join(f"{i.field} {i.type}" for i in d.index) or "(none)"


def _field(f: ValueField) -> str:
    return f"{f.name} {f.type}"

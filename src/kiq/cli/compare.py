"""What ``kiq diff`` compares: two key-ordered streams of a table's (key, value) items.

Pure, so that it is tested without a node: ``versions.diff`` feeds it one page per side at
a time, and it keeps only counts and at most ``sample`` examples of each kind, so a table
of any size is compared in bounded memory.

Values are compared as JSON, field by field: a change is named by its dotted path
(``a.b[2].c``; ``""`` for a value that is not an object or a list), with both sides'
values. ``ignore`` drops paths (and everything below them) from the comparison; a path
written with ``[*]`` (``items[*].ts``) stands for every index. ``tolerance`` makes numbers
at most that far apart (absolute) equal.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kiq.errors import KiqError

Item = tuple[str, Any]
_INDEX = re.compile(r"\[\d+\]")
_SHOWN_CHARS = 160


class Absent(Enum):
    """A field (or key) one side does not have: not the same as JSON ``null``."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = Absent.ABSENT


class OutOfOrder(KiqError):
    """A side's keys did not come in byte order: merging would report false differences."""


def field_of(path: str) -> str:
    """The field a path belongs to, list indices folded (``a.b[2].c`` -> ``a.b[*].c``):
    changes are counted per field, so a list of a thousand items makes one line, not a
    thousand."""
    return _INDEX.sub("[*]", path)


@dataclass(frozen=True)
class Rules:
    """How two values are compared: paths to leave out, and how far apart numbers may be."""

    ignore: frozenset[str] = frozenset()
    tolerance: float = 0.0

    def ignored(self, path: str) -> bool:
        return path in self.ignore or field_of(path) in self.ignore


@dataclass(frozen=True)
class PathChange:
    """One path whose value differs; ``ABSENT`` on the side that lacks it."""

    path: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path}
        if self.old is not ABSENT:
            doc["old"] = self.old
        if self.new is not ABSENT:
            doc["new"] = self.new
        return doc


def _is_number(value: Any) -> bool:
    # bool is an int in Python, but true and 1 are different JSON values.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(old: Any, new: Any, tolerance: float) -> bool:
    if _is_number(old) and _is_number(new):
        if old == new:
            return True
        apart = abs(old - new)
        # 100.01 - 100 is 0.01000000000000512: a difference of exactly the tolerance, as
        # written, counts as within it.
        return bool(apart <= tolerance or (tolerance > 0 and math.isclose(apart, tolerance)))
    return type(old) is type(new) and bool(old == new)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def diff_values(old: Any, new: Any, rules: Rules = Rules()) -> list[PathChange]:
    """The paths at which ``new`` differs from ``old``, in ``old``'s field order."""
    changes: list[PathChange] = []
    _walk(old, new, rules, "", changes)
    return changes


def _walk(old: Any, new: Any, rules: Rules, path: str, out: list[PathChange]) -> None:
    if path and rules.ignored(path):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for name in {**old, **new}:
            _walk(old.get(name, ABSENT), new.get(name, ABSENT), rules, _child(path, name), out)
    elif isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            mine = old[i] if i < len(old) else ABSENT
            theirs = new[i] if i < len(new) else ABSENT
            _walk(mine, theirs, rules, f"{path}[{i}]", out)
    elif not _same(old, new, rules.tolerance):
        out.append(PathChange(path, old, new))


def _in_order(items: Iterable[Item], side: str) -> Iterator[Item]:
    previous: str | None = None
    for key, value in items:
        if previous is not None and key <= previous:
            raise OutOfOrder(
                f"{side}: key {key!r} came after {previous!r}: the node did not return keys "
                "in byte order, so the comparison would be wrong; is every node the same kiq?"
            )
        previous = key
        yield key, value


def merge(
    left: Iterable[Item], right: Iterable[Item], sides: tuple[str, str] = ("from", "to")
) -> Iterator[tuple[str, Any, Any]]:
    """(key, left value, right value) for every key of either side, in key order, with
    ``ABSENT`` for the side without it; each side is read one item at a time.

    Keys are ``str``: code-point order is the UTF-8 byte order the nodes return them in.
    """
    lefts, rights = _in_order(left, sides[0]), _in_order(right, sides[1])
    mine, theirs = next(lefts, None), next(rights, None)
    while mine is not None or theirs is not None:
        if theirs is None or (mine is not None and mine[0] < theirs[0]):
            assert mine is not None
            yield mine[0], mine[1], ABSENT
            mine = next(lefts, None)
        elif mine is None or theirs[0] < mine[0]:
            yield theirs[0], ABSENT, theirs[1]
            theirs = next(rights, None)
        else:
            yield mine[0], mine[1], theirs[1]
            mine, theirs = next(lefts, None), next(rights, None)


@dataclass
class Diff:
    """Exact counts of a comparison, a few examples of each kind, and how to show them."""

    table: str
    old: str
    new: str
    rules: Rules = field(default_factory=Rules)
    sample: int = 10
    equal: int = 0
    changed: int = 0
    only_old: int = 0
    only_new: int = 0
    fields: Counter[str] = field(default_factory=Counter)
    changed_examples: list[tuple[str, list[PathChange]]] = field(default_factory=list)
    only_old_examples: list[Item] = field(default_factory=list)
    only_new_examples: list[Item] = field(default_factory=list)

    @property
    def compared(self) -> int:
        """Every key either side has."""
        return self.equal + self.changed + self.only_old + self.only_new

    @property
    def same(self) -> bool:
        return self.compared == self.equal

    def add(self, key: str, old: Any, new: Any) -> None:
        """Count one key of ``merge``'s."""
        if new is ABSENT:
            self.only_old += 1
            if len(self.only_old_examples) < self.sample:
                self.only_old_examples.append((key, old))
            return
        if old is ABSENT:
            self.only_new += 1
            if len(self.only_new_examples) < self.sample:
                self.only_new_examples.append((key, new))
            return
        changes = diff_values(old, new, self.rules)
        if not changes:
            self.equal += 1
            return
        self.changed += 1
        self.fields.update({field_of(c.path) for c in changes})
        if len(self.changed_examples) < self.sample:
            self.changed_examples.append((key, changes))

    def to_json(self) -> dict[str, Any]:
        """One document for ``kiq diff --json``; a change leaves out the side it lacks."""
        return {
            "table": self.table,
            "from": self.old,
            "to": self.new,
            "equal": self.same,
            "counts": {
                "compared": self.compared,
                "equal": self.equal,
                "changed": self.changed,
                "only_from": self.only_old,
                "only_to": self.only_new,
            },
            "fields": dict(self.fields.most_common()),
            "ignore": sorted(self.rules.ignore),
            "tolerance": self.rules.tolerance,
            "examples": {
                "changed": [
                    {"key": k, "changes": [c.to_json() for c in cs]}
                    for k, cs in self.changed_examples
                ],
                "only_from": [{"key": k, "value": v} for k, v in self.only_old_examples],
                "only_to": [{"key": k, "value": v} for k, v in self.only_new_examples],
            },
        }

    def render(self, console: Console) -> None:
        """The summary, the changed fields and the examples, for a person."""
        verdict = "[green]equal[/]" if self.same else "[bold red]different[/]"
        console.print(
            f"[bold]{escape(self.table)}[/]: {escape(self.old)} vs {escape(self.new)}: {verdict}",
            soft_wrap=True,
        )
        console.print(
            f"  {self.compared:,} keys: {self.equal:,} equal, {self.changed:,} changed, "
            f"{self.only_old:,} only in {escape(self.old)}, "
            f"{self.only_new:,} only in {escape(self.new)}",
            soft_wrap=True,
        )
        if self.rules.ignore or self.rules.tolerance:
            ignored = ", ".join(sorted(self.rules.ignore)) or "nothing"
            console.print(
                f"  ignored: {escape(ignored)}; numbers within {self.rules.tolerance:g} equal",
                soft_wrap=True,
            )
        if self.fields:
            table = Table(title="changed fields", title_justify="left")
            table.add_column("field")
            table.add_column("keys", justify="right")
            for name, count in self.fields.most_common():
                table.add_row(escape(name or "(value)"), f"{count:,}")
            console.print(table)
        if self.changed_examples:
            console.print(_heading("changed", len(self.changed_examples), self.changed))
            for key, changes in self.changed_examples:
                console.print(f"  [bold]{escape(key)}[/]", soft_wrap=True)
                for c in changes:
                    console.print(
                        f"    {escape(c.path or '(value)')}: {escape(_shown(c.old))} -> "
                        f"{escape(_shown(c.new))}",
                        soft_wrap=True,
                    )
        for side, examples, count in (
            (self.old, self.only_old_examples, self.only_old),
            (self.new, self.only_new_examples, self.only_new),
        ):
            if examples:
                console.print(_heading(f"only in {side}", len(examples), count))
                for key, value in examples:
                    console.print(
                        f"  [bold]{escape(key)}[/] {escape(_shown(value))}", soft_wrap=True
                    )


def _heading(kind: str, shown: int, count: int) -> str:
    which = f"all {count:,}" if shown == count else f"{shown:,} of {count:,}"
    return f"[bold]{escape(kind)}[/] ({which}):"


def _shown(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    text = orjson.dumps(value).decode()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def compare(
    left: Iterable[Item],
    right: Iterable[Item],
    *,
    table: str,
    old: str,
    new: str,
    rules: Rules = Rules(),
    sample: int = 10,
) -> Diff:
    """Compare two key-ordered streams (``old``'s and ``new``'s) of ``table``'s items."""
    diff = Diff(table=table, old=old, new=new, rules=rules, sample=sample)
    for key, mine, theirs in merge(left, right, (old, new)):
        diff.add(key, mine, theirs)
    return diff

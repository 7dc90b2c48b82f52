"""Every read of a replica's store goes through ``kiq.replicas.reads``.

That module hides what aged out of a table with a TTL or retention and raises
``StoreClosedError`` for a store closed under the read, once for every reader. So no
module of ``src/kiq`` but it calls a store's read methods (``get``, ``scan``, ``top``,
``index_scan``) on a replica's store: not ``replica.store.get(...)``, not through a name
bound to ``replica.store`` (``store = r.store`` or ``store, aging = r.store, r.aging``), and not
through a parameter typed as a store (``store: ReadOnlyStore``). ``kiq.stores``, the
stores themselves, is outside the scan. Other uses of a replica's store stay allowed:
its writer's ``apply``, ``close`` and ``wipe``, ``count`` and ``size_bytes`` for metrics,
``rank_by``, and telling one store from another (the reopen wait).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "kiq"
DOOR = SRC / "replicas" / "reads.py"
STORES = SRC / "stores"
READS = frozenset({"get", "scan", "top", "index_scan"})
STORE_TYPES = ("ReadOnlyStore", "PartitionStore", "RocksDBPartitionStore", "MemoryPartitionStore")


def _is_store(node: ast.expr) -> bool:
    """``<anything>.store``."""
    return isinstance(node, ast.Attribute) and node.attr == "store"


def _typed_as_store(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(t in ast.unparse(annotation) for t in STORE_TYPES)


def _store_names(tree: ast.Module) -> set[str]:
    """Names bound to a replica's store, or parameters typed as a store, in ``tree``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs: list[tuple[ast.expr, ast.expr | None]] = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                for name, value in pairs:
                    if isinstance(name, ast.Name) and value is not None and _is_store(value):
                        names.add(name.id)
            typed = isinstance(node, ast.AnnAssign) and _typed_as_store(node.annotation)
            if typed and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        elif isinstance(node, ast.arg) and _typed_as_store(node.annotation):
            names.add(node.arg)
    return names


def store_reads(tree: ast.Module) -> list[ast.Attribute]:
    """Each ``<a replica's store>.get``/``.scan``/``.top`` in ``tree``, called or bound."""
    names = _store_names(tree)
    found: list[ast.Attribute] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in READS:
            continue
        owner = node.value
        if _is_store(owner) or (isinstance(owner, ast.Name) and owner.id in names):
            found.append(node)
    return sorted(found, key=lambda n: n.lineno)


def _outside_the_door() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if p != DOOR and not p.is_relative_to(STORES)]


def test_no_module_but_the_door_reads_a_replicas_store():
    found = [
        f"{path.relative_to(SRC.parent)}:{node.lineno}: {ast.unparse(node)}"
        for path in _outside_the_door()
        for node in store_reads(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "read a replica through kiq.replicas.reads:\n" + "\n".join(found)


def test_the_door_itself_is_seen_by_the_scan():
    """The scan finds the door's own reads: it looks where the reads are."""
    assert DOOR.exists() and store_reads(ast.parse(DOOR.read_text()))


def test_the_scan_sees_each_form_it_names():
    source = (
        "replica.store.get(k)\n"
        "self._replicas[p].store.scan(a, b, 10)\n"
        "get = replica.store.get\n"
        "store = replica.store\n"
        "store.top(3)\n"
        "store2, aging = replica.store, replica.aging\n"
        "store2.get(k)\n"
        "def f(s: ReadOnlyStore) -> None:\n"
        "    s.scan(None, None, 1)\n"
        "replica.store.close()\n"
        "replica.store.count()\n"
        "closed = replica.store\n"
        "closed is not replica.store\n"
        "self._replicas.get((t, p))\n"
        "spec.store == 'rocksdb'\n"
    )
    lines = [n.lineno for n in store_reads(ast.parse(source))]
    assert lines == [1, 2, 3, 5, 7, 9]

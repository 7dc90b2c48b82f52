"""What the table name in a request means: the table's current version, or ``?version=V``.

Each request resolves its table's name once, here, as it comes in; from then on it
carries the version's internal name (``kiq.tables.versions``), and so do its forwards.
A ``kiq switch`` in between moves the requests that come after it, never one in flight.
"""

from __future__ import annotations

from kiq.api.errors import UnknownTable
from kiq.node import NodeView
from kiq.tables import TableRuntime

VERSION = "x-kiq-version"
VERSION_HEADER = VERSION.encode()


def resolve(node: NodeView, table: str, version: str | None = None) -> TableRuntime:
    """``table``'s runtime (at ``version`` when given), or a 404 saying what exists."""
    runtime = node.resolve(table, version or None)
    if runtime is not None:
        return runtime
    versions = sorted(node.versions_of(table)) if version else []
    if versions:
        raise UnknownTable(
            f"table {table!r} has no version {version!r}: it has {', '.join(versions)}",
            table=table,
            version=version,
        )
    raise UnknownTable(f"no table named {table!r}", table=table)


def version_header(runtime: TableRuntime) -> tuple[bytes, bytes]:
    """The header every answer of a table read carries: which version answered."""
    return VERSION_HEADER, runtime.spec.version.encode()

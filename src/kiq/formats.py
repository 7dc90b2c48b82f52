"""The versions of kiq's formats: what this code writes, and the newest it can read.

Every format one kiq process writes for another to read, maybe a kiq of another release,
carries a version (``docs/guides/upgrading.md`` says when one is bumped):

    format          where its version is                                  0.1.0's
    peer wire       the ``X-Kiq-Wire`` header of every node-to-node call   1 (no header)
                    (its oldest-newest range), agreed at the hello
    catalog record  ``format_version`` in the record's JSON                1 (no field)
    progress record ``format_version`` in the record's JSON                1 (no field)
    batch marker    the record's ``kiq-format`` Kafka header               1 (no header)
    store layout    the ``KIQ-LAYOUT`` file in each partition store        1 (no file)

A record, header or file without a version is version 1: what 0.1.0 wrote. A version
added where 0.1.0 never looks (a JSON field its decoders skip, a header, a file beside
RocksDB's), so a node of the release before reads what this one writes. A piece newer
than this code reads is refused, never guessed at: the record skipped, the store left
closed, the peer not asked; ``too_new`` says so once in the log.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

WIRE = 2  # 2: the hello agrees on a version (1: 0.1.0's, which says none)
WIRE_OLDEST = 1  # the oldest peer wire this code still speaks: a node of 0.1.0
CATALOG = 1
PROGRESS = 1
MARKER = 1
STORE_LAYOUT = 1
UNVERSIONED = 1  # the version of a piece that names none: 0.1.0 wrote it

_said: set[tuple[str, str, int]] = set()
_SAID_MAX = 10_000


def too_new(what: str, name: str, version: int, known: int) -> bool:
    """Whether ``version`` of ``what`` (named ``name``: a record's key, a store, a peer) is
    newer than ``known``, the newest this code reads; the first time for each, one line in
    the log says so and that the piece is refused."""
    if version <= known:
        return False
    seen = (what, name, version)
    if seen not in _said:
        if len(_said) >= _SAID_MAX:
            _said.clear()
        _said.add(seen)
        log.error(
            "refused: %s %s is format version %d, newer than this kiq reads (%d); "
            "upgrade this node to read it",
            what,
            name,
            version,
            known,
        )
    return True

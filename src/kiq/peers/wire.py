"""What nodes say to each other: the internal paths, their headers and their msgpack records.

Every node-to-node call is one HTTP/1.1 request to an internal path, msgpack both ways,
decoded into the records below (``peers/sender.py`` sends them, ``api/`` answers them):

    POST /v1/internal/lookups   [Lookup, ...]        → [LookupResult, ...] in the same order
    POST /v1/internal/multiget  Multiget             → MultigetResult
    POST /v1/internal/scan      Scan                 → ScanResult
    POST /v1/internal/top       Top                  → ScanResult (the partition's head)
    POST /v1/internal/by-index  ByIndex              → IndexResult (entries of an index)
    POST /v1/internal/by-index-many  ByIndexMany     → IndexResults (one per read, in order)
    POST /v1/internal/changes   Changes              → ChangesResult (a watch relayed)
    GET  /v1/internal/metadata  (no body)            → NodeStatus
    POST /v1/internal/hello     16 random bytes      → the same bytes (sealed: a member's proof),
                                                       then ";wire=N" when the asker named its wire
    GET  /v1/internal/channel   WebSocket upgrade: ChannelAsk messages → ChannelAnswer messages

A channel (``peers/channel.py``) carries lookup batches: each ``ChannelAsk`` holds the
body, credential and caller statement a ``POST /v1/internal/lookups`` would carry, each
``ChannelAnswer`` the status and (sealed) body its answer would have.

Values travel as the bytes the store holds; they are decoded once, where a response
is rendered. The receiver answers from its own replicas only and never forwards.
Lookup records are msgpack arrays, not maps (``array_like``), so a lookup costs a
few bytes beyond its key and value:

    Lookup          [table, key(bin), max_lag|nil, min_offset|nil, wait_ms]
    LookupResult    [outcome, partition, lag, stale, served_by(bin), offset, value(bin), reason,
                     applied]
    Multiget        [table, [key(bin)...], max_lag|nil]
    MultigetResult  [[item...], [refused partition...], [Source...]]
    Scan            [table, partition, start|nil, end|nil, limit, reverse, max_lag|nil]
    ScanResult      [[item...], Source|nil, reverse, window(bin)]
    Top             [table, partition, n, prefix(bin), max_lag|nil, window(bin)]
    ByIndex         [table, partition, field, start(bin)|nil, end(bin)|nil, limit, reverse,
                     count, max_lag|nil, batch|nil, min_offset|nil, cursor(bin)|nil]
    IndexResult     [[[entry(bin), key(bin), value(bin)]...], Source|nil, reverse, count, field]
    ByIndexMany     [[ByIndex...]]
    IndexResults    [[IndexResult|nil...]]
    Source          [partition, lag, stale, applied_offset, served_by(bin)]
    Changes         [table, partition, [[key(bin), offset]...], [prefix(bin)...], through, wait_ms,
                     since|nil]
    ChangesResult   [[[key(bin), value(bin)|nil, offset]...], Source|nil, [count...],
                     [prefix(bin)...]]
    ChannelAsk      [id, body(bin), credential, statement]
    ChannelAnswer   [id, status, body(bin)]

Fields were added at the end of a record only, with defaults: a record from an older
node decodes with them (``reverse`` false: an ascending scan), and an older node
ignores trailing fields it does not know. So the asker checks what it depends on: a
scan asked in reverse whose answer does not say ``reverse`` came from a node that
scanned forwards, and is not taken; a top asked within a window whose answer does not
echo that ``window`` came from a node that ranked every window, and is not taken either;
an index read's answer echoes its ``field`` and ``reverse``, and its ``count`` when asked.

Versions (``kiq.formats.WIRE``): every request carries ``X-Kiq-Wire: OLDEST-NEWEST``, the
wire versions its sender speaks; a request without it is from 0.1.0, version 1. A node
refuses a request whose OLDEST is newer than its own version (400 ``wire_too_new``, said
once in its log), never reads it. At the hello (with a cluster secret, before anything
else is sent) the two agree: the answer's challenge is
followed by ``;wire=N``, N the newest both speak; an answer of the bare challenge is from
0.1.0 (version 1), which ignores the header. A peer the asker cannot speak with is treated
as one that cannot prove it is a member: its partitions are read from other replicas.

A lookup's ``Outcome`` travels as a small int (one byte); HTTP statuses are the API's own
business (``api/errors.py`` maps outcomes to them). What the receiver answers per item:

    1 FOUND        the value, from the receiver's replica
    2 MISSING      no such key in it
    3 MOVED        no usable replica of the partition (or no such table) here: ask the next
    4 UNAVAILABLE  ``min_offset`` not applied within ``wait_ms``
    5 BUSY         too many lookups wait for ``min_offset`` on the receiver already
    6 BAD_KEY      a malformed key: no replica will answer it
    7 FORBIDDEN    the caller the request vouches for may not read the table

and what the asking node says of a lookup that got none of those, which never travels:

    0 FAILED       the target could not be reached, or did not answer the batch
   -1 HEDGED       a race given up for this node's own replica (``hedging.py``)
   -2 NO_REPLICA   every replica was asked and none answered (``reason``: the last one's)
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Final

import msgspec

from kiq import formats

INTERNAL_LOOKUPS: Final = "/v1/internal/lookups"
INTERNAL_MULTIGET: Final = "/v1/internal/multiget"
INTERNAL_SCAN: Final = "/v1/internal/scan"
INTERNAL_TOP: Final = "/v1/internal/top"
INTERNAL_BY_INDEX: Final = "/v1/internal/by-index"
# Several index reads in one request: a query's partitions a peer is the first choice for.
INTERNAL_BY_INDEX_MANY: Final = "/v1/internal/by-index-many"
# Several partitions' heads of one top in one request, as the index reads above.
INTERNAL_TOP_MANY: Final = "/v1/internal/top-many"
INTERNAL_METADATA: Final = "/v1/internal/metadata"
INTERNAL_CHANGES: Final = "/v1/internal/changes"
# A challenge (16 random bytes) answered sealed: a peer proves it holds the cluster secret
# before it is sent anything else (peers/sender.py).
INTERNAL_HELLO: Final = "/v1/internal/hello"
# A WebSocket upgrade: lookup batches as messages on one connection (peers/channel.py).
INTERNAL_CHANNEL: Final = "/v1/internal/channel"
# The subprotocol a channel that also carries reads (multigets, scans, tops, index pages:
# ``ChannelAsk.path``) is upgraded with: a node that answers without it (an older kiq) is
# sent lookup batches alone on it.
READS_PROTOCOL: Final = "kiq-reads"
# The subprotocol of a channel that carries reads and packs: each message the asker sends
# is a list of the ``ChannelAsk``s it made in one turn of its loop, each the owner sends a
# list of the ``ChannelAnswer``s it finished in one (one message, not one per read, at
# either end). Offered before ``READS_PROTOCOL``; a node that does not know it picks that.
PACKED_PROTOCOL: Final = "kiq-packed"
# The most rows a read's answer may hold to go on a channel: a bigger page goes over HTTP,
# so that no lookup's answer waits behind it on the channel.
CHANNEL_MAX_ROWS: Final = 400
HEALTH_LIVE: Final = "/v1/health/live"  # a node's liveness: the probe of a peer gone quiet

MSGPACK: Final = "application/msgpack"
# Request headers, spelled once (lower case, as ASGI servers hand them over).
# A target that is this node itself, among the member URLs a request may go to.
LOCAL: Final = "local"
FORWARDED: Final = "x-kiq-forwarded"  # the sending node's id: answer locally, never forward
# The caller the sending node verified (``kiq.security.VerifiedCaller.statement``), covered by
# the cluster credential: the caller's own token never leaves the node it reached.
PRINCIPAL: Final = "x-kiq-principal"
# The peer wire versions the sender speaks, OLDEST-NEWEST (absent: 0.1.0's, version 1).
WIRE: Final = "x-kiq-wire"
SPOKEN: Final = f"{formats.WIRE_OLDEST}-{formats.WIRE}"
_AGREED = b";wire="


def wire_range(value: str | None) -> tuple[int, int] | None:
    """The (oldest, newest) wire versions an ``X-Kiq-Wire`` header names; (1, 1) when there
    is none (0.1.0), None when it is malformed."""
    if value is None:
        return formats.UNVERSIONED, formats.UNVERSIONED
    oldest, dash, newest = value.partition("-")
    if not dash or not (0 < len(oldest) <= 6 and oldest.isdigit()):
        return None
    if not (0 < len(newest) <= 6 and newest.isdigit()) or int(oldest) > int(newest):
        return None
    return int(oldest), int(newest)


def hello_answer(challenge: bytes, asked: tuple[int, int] | None) -> bytes:
    """What the hello answers (sealed, by the caller): the challenge, and the wire version
    agreed when the asker named its own (``X-Kiq-Wire``: 0.1.0 names none and takes the
    bare challenge)."""
    if asked is None:
        return challenge
    return challenge + _AGREED + str(min(asked[1], formats.WIRE)).encode()


def agreed(challenge: bytes, answer: bytes) -> int | None:
    """The wire version a hello's (opened) answer agrees on: 1 for the bare challenge (a node
    of 0.1.0), None when it answers another challenge or is malformed."""
    if answer == challenge:
        return formats.UNVERSIONED
    head = challenge + _AGREED
    version = answer[len(head) :]
    if not answer.startswith(head) or not (0 < len(version) <= 6 and version.isdigit()):
        return None
    return int(version)


class Outcome(IntEnum):
    """What became of one lookup; the table in this module's docstring says each."""

    FOUND = 1
    MISSING = 2
    MOVED = 3
    UNAVAILABLE = 4
    BUSY = 5
    BAD_KEY = 6
    FORBIDDEN = 7
    # The asking node's own: never on the wire.
    FAILED = 0
    HEDGED = -1
    NO_REPLICA = -2


# (key, value as stored)
Item = tuple[bytes, bytes]


class Lookup(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One key to look up in the receiver's own replica."""

    table: str
    key: bytes
    max_lag: int | None = None
    min_offset: int | None = None
    wait_ms: int = 0


class LookupResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The answer for one key; ``served_by`` is bytes as it goes into a header as is.

    ``offset`` is the value's (FOUND), or the offset the replica has applied
    (UNAVAILABLE: short of the ``min_offset`` asked; ``lag``: by how many records).
    ``applied``: the offset the answering replica had applied once it read the key (FOUND,
    MISSING), what the answer's position token says (``kiq.positions``); -1 from an older
    node, which did not say.
    """

    outcome: Outcome
    partition: int = -1
    lag: int = 0
    stale: bool = False
    served_by: bytes = b""
    offset: int = -1
    value: bytes = b""
    reason: str = ""  # why there is no value: any outcome but FOUND and MISSING
    applied: int = -1


class Source(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The replica that answered for a partition, as fresh as it was: ``lag`` records behind
    its log end, ``stale`` when not the active replica, ``applied_offset`` (-1: unknown)."""

    partition: int
    lag: int = 0
    stale: bool = False
    applied_offset: int = -1
    served_by: bytes = b""  # the node's id; empty: an older node that did not say
    batch: int = -1  # the batch marker it answered as of (``consistent=batch``); -1: none


# ``batch`` of a read as of the newest batch marker each replica holds (``replicas.snapshots``)
LATEST_BATCH = -1


class Multiget(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Keys of one table, from whichever of their partitions the receiver can serve (only
    from a replica at most ``max_lag`` records behind, when given)."""

    table: str
    keys: list[bytes]
    max_lag: int | None = None
    batch: int | None = None  # as of this batch marker (-1: the newest each replica holds)
    after: dict[int, int] = {}  # partition → the offset its replica must have applied


class MultigetResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The keys found; ``refused`` the partitions the receiver holds no usable replica of;
    ``sources`` the replicas that answered, one per partition read.

    A key asked that is neither found nor in a refused partition is absent.
    """

    found: list[Item] = []
    refused: list[int] = []
    sources: list[Source] = []


class Scan(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Up to ``limit`` keys of one partition in [start, end) in byte order, descending when
    ``reverse``; from a replica at most ``max_lag`` records behind, when given."""

    table: str
    partition: int
    start: bytes | None = None
    end: bytes | None = None
    limit: int = 1000
    reverse: bool = False
    max_lag: int | None = None
    batch: int | None = None  # as ``Multiget.batch``
    min_offset: int | None = None  # the offset the replica must have applied
    # A key's windows: the bytes of ENTITY{sep} before each key's times, and the answer is
    # the page made (``ScanResult.page``, ``kiq.tables.windows.WindowPage``); 0: the rows.
    # A node of an older kiq ignores it and answers the rows.
    windows: int = 0


class ScanResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A page of a partition, in the order asked (``reverse`` says which was scanned)."""

    items: list[Item] = []
    source: Source | None = None
    reverse: bool = False
    window: bytes = b""  # a top's: the window start it kept (``Top.window``), echoed
    # ``Scan.windows``'s answer instead of ``items``: the page's JSON, its rows, its last key
    page: bytes = b""
    rows: int = 0
    last: bytes = b""


class Top(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The first ``n`` keys of one partition in its table's rank order (``rank_by``: highest
    first, ties by key), only keys starting with ``prefix`` when not empty, only windows
    starting at ``window`` (a windowed table's START, as keys write it) when not empty;
    from a replica at most ``max_lag`` records behind, when given. Answered with a
    ``ScanResult`` that echoes ``window``."""

    table: str
    partition: int
    n: int = 10
    prefix: bytes = b""
    max_lag: int | None = None
    window: bytes = b""
    batch: int | None = None  # as ``Multiget.batch``
    min_offset: int | None = None  # the offset the replica must have applied


class TopMany(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The heads of one top, each as ``Top``, answered in one ``TopResults``: a node asks a
    peer once for every partition it is the first choice for, not once each."""

    reads: list[Top] = []


class TopResults(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One answer per read of a ``TopMany``, in its order: None where the receiver holds
    no usable ranked replica for that read (a ``Top`` would have been a 421)."""

    answers: list[ScanResult | None] = []


# (index entry, key, value as stored): an index read's item (``kiq.stores.index``)
IndexItem = tuple[bytes, bytes, bytes]
NOT_COUNTED = -1  # ``IndexResult.count`` when no count was asked


class ByIndex(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Up to ``limit`` entries of one partition's index of ``field`` in [start, end) in entry
    byte order (descending when ``reverse``), past ``cursor`` when given (above it
    ascending, below it descending: the last entry of the page before); with ``count``,
    how many entries [start, end) holds (the cursor aside). From a replica at most
    ``max_lag`` records behind, when given. Answered with an ``IndexResult``."""

    table: str
    partition: int
    field: str
    start: bytes | None = None
    end: bytes | None = None
    limit: int = 100
    reverse: bool = False
    count: bool = False
    max_lag: int | None = None
    batch: int | None = None  # as ``Multiget.batch``
    min_offset: int | None = None  # the offset the replica must have applied
    cursor: bytes | None = None


class IndexResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A page of a partition's index, in the order asked (``reverse`` says which was read),
    ``count`` the entries in the asked bounds (``NOT_COUNTED``: none asked), ``field`` the
    index read, echoed."""

    items: list[IndexItem] = []
    source: Source | None = None
    reverse: bool = False
    count: int = NOT_COUNTED
    field: str = ""


# The most reads one ``ByIndexMany`` may carry (a query reads each partition once or twice).
MAX_INDEX_READS: Final = 1024


class ByIndexMany(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Index reads of one query, each as ``ByIndex``, answered in one ``IndexResults``: a
    node asks a peer once for every partition it is the first choice for, not once each."""

    reads: list[ByIndex] = []


class IndexResults(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One answer per read of a ``ByIndexMany``, in its order: None where the receiver
    holds no usable replica for that read (a ``ByIndex`` would have been a 421)."""

    answers: list[IndexResult | None] = []


class Changes(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A watch relayed from a node without a replica of the partition (``kiq.live``): what
    the asker knows of some keys (``known``: each key's offset, -1 for absent) and of the
    keys under ``prefixes``; the receiver waits up to ``wait_ms`` for its replica to apply
    anything past ``through``, then answers every key whose state differs from ``known``.

    Under ``prefixes``, ``known`` names no key: the asker sends a cursor, ``since``, and is
    answered the keys there written after it (every one at -1), with how many each prefix
    holds, so that the request stays small however many keys the asker has seen (it finds
    a deletion by a count lower than its own, and then asks ``since`` -1 to learn which).
    An asker of an older kind sends no ``since`` (None): a key under a prefix that
    ``known`` lacks counts as known absent then.

    ``counts``: how many keys the asker holds under each prefix, in ``prefixes`` order. With
    them the receiver can tell a write the asker must hear of from one it need not (a count
    of its own that differs: keys were deleted), and waits for the former only, so a relay
    costs a round trip per change of what it watches, not per batch its partition applies.
    Without them (an older asker), a prefix's deletions show only in the counts, and any
    write past ``through`` is answered."""

    table: str
    partition: int
    known: list[tuple[bytes, int]] = []
    prefixes: list[bytes] = []
    through: int = -1
    wait_ms: int = 0
    since: int | None = None
    counts: list[int] | None = None


class ChangesResult(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The keys whose state differs from what the asker knew (a value with its offset, or
    ``None`` for a key now absent), and the replica that answered: its ``applied_offset``
    is the offset the answer holds everything up to. ``counts``: how many keys each asked
    prefix holds, in the asked order; ``overflow``: the prefixes holding more keys than a
    watch may (``replicas.reads.MAX_PREFIX_KEYS``), answered in part."""

    changed: list[tuple[bytes, bytes | None, int]] = []
    source: Source | None = None
    counts: list[int] = []
    overflow: list[bytes] = []


class ChannelAsk(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A lookup batch on a channel: what its HTTP request would carry (``credential``: its
    ``X-Kiq-Cluster``, ``principal``: its ``X-Kiq-Principal``; empty when it has none).
    ``path``: the internal POST it stands for, a read's on a channel upgraded with
    ``READS_PROTOCOL``; empty for a lookup batch (an older node reads no
    more than the four fields before it)."""

    id: int
    body: bytes
    credential: str = ""
    principal: str = ""
    path: str = ""


class ChannelAnswer(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The answer to the ask with the same ``id``: its HTTP answer's status and body."""

    id: int
    status: int
    body: bytes = b""


class ReplicaStatus(msgspec.Struct, frozen=True):
    """One local replica as its node describes it (``Replica.describe``), field for field."""

    table: str
    partition: int
    role: str
    state: str
    applied_offset: int
    end_offset: int
    lag: int
    restored_records: int
    restore_s: float | None
    lingering: bool
    fault: str | None = None
    keys: int = 0  # the store's count (RocksDB's estimate)
    bytes: int = 0  # the store's size on disk (SST files)
    # Wall clock (epoch ms): its first record applied while restoring, and its catching up.
    restore_began_at_ms: int | None = None
    caught_up_at_ms: int | None = None

    @classmethod
    def of(cls, described: Mapping[str, object]) -> ReplicaStatus:
        """From ``Replica.describe()``; ``ValidationError`` if the two ever drift apart."""
        return msgspec.convert(described, cls)

    def as_dict(self) -> dict[str, Any]:
        """As ``Replica.describe()`` gives it, for a JSON response."""
        return msgspec.structs.asdict(self)


class NodeStatus(msgspec.Struct, frozen=True):
    """A node's own replicas, for the cluster-wide metadata another node assembles.

    Maps, not arrays: read by operators' tools too, and tolerant of added fields.
    """

    node_id: str
    view_version: int
    replicas: list[ReplicaStatus]
    # Which version each table's name means on that node, and every version it serves (by
    # internal name): how `kiq switch` and `kiq retire` see every node has followed.
    current: dict[str, str] = {}
    tables: list[str] = []


DecodeError = msgspec.DecodeError

_encoder = msgspec.msgpack.Encoder()
_lookups = msgspec.msgpack.Decoder(list[Lookup])
_results = msgspec.msgpack.Decoder(list[LookupResult])
_multiget = msgspec.msgpack.Decoder(Multiget)
_multiget_result = msgspec.msgpack.Decoder(MultigetResult)
_scan = msgspec.msgpack.Decoder(Scan)
_scan_result = msgspec.msgpack.Decoder(ScanResult)
_top = msgspec.msgpack.Decoder(Top)
_by_index = msgspec.msgpack.Decoder(ByIndex)
_index_result = msgspec.msgpack.Decoder(IndexResult)
_by_index_many = msgspec.msgpack.Decoder(ByIndexMany)
_top_many = msgspec.msgpack.Decoder(TopMany)
_top_results = msgspec.msgpack.Decoder(TopResults)
_index_results = msgspec.msgpack.Decoder(IndexResults)
_node_status = msgspec.msgpack.Decoder(NodeStatus)
_changes = msgspec.msgpack.Decoder(Changes)
_changes_result = msgspec.msgpack.Decoder(ChangesResult)
_channel_ask = msgspec.msgpack.Decoder(ChannelAsk)
_channel_answer = msgspec.msgpack.Decoder(ChannelAnswer)
_channel_asks = msgspec.msgpack.Decoder(list[ChannelAsk])
_channel_answers = msgspec.msgpack.Decoder(list[ChannelAnswer])


def encode(record: object) -> bytes:
    """Any record above (or a list of them) as msgpack."""
    return _encoder.encode(record)


# Each raises ``DecodeError`` (or its subclass ``ValidationError``) on a malformed body.


def decode_lookups(body: bytes) -> list[Lookup]:
    return _lookups.decode(body)


def decode_results(body: bytes) -> list[LookupResult]:
    return _results.decode(body)


def decode_multiget(body: bytes) -> Multiget:
    return _multiget.decode(body)


def decode_multiget_result(body: bytes) -> MultigetResult:
    return _multiget_result.decode(body)


def decode_scan(body: bytes) -> Scan:
    return _scan.decode(body)


def decode_scan_result(body: bytes) -> ScanResult:
    return _scan_result.decode(body)


def decode_top(body: bytes) -> Top:
    return _top.decode(body)


def decode_top_many(body: bytes) -> TopMany:
    return _top_many.decode(body)


def decode_top_results(body: bytes) -> TopResults:
    return _top_results.decode(body)


def decode_by_index(body: bytes) -> ByIndex:
    return _by_index.decode(body)


def decode_index_result(body: bytes) -> IndexResult:
    return _index_result.decode(body)


def decode_by_index_many(body: bytes) -> ByIndexMany:
    return _by_index_many.decode(body)


def decode_index_results(body: bytes) -> IndexResults:
    return _index_results.decode(body)


def decode_node_status(body: bytes) -> NodeStatus:
    return _node_status.decode(body)


def decode_changes(body: bytes) -> Changes:
    return _changes.decode(body)


def decode_changes_result(body: bytes) -> ChangesResult:
    return _changes_result.decode(body)


def decode_channel_ask(body: bytes) -> ChannelAsk:
    return _channel_ask.decode(body)


def decode_channel_answer(body: bytes) -> ChannelAnswer:
    return _channel_answer.decode(body)


def decode_channel_asks(body: bytes) -> list[ChannelAsk]:
    """A message of a ``PACKED_PROTOCOL`` channel's asker."""
    return _channel_asks.decode(body)


def decode_channel_answers(body: bytes) -> list[ChannelAnswer]:
    """A message of a ``PACKED_PROTOCOL`` channel's owner."""
    return _channel_answers.decode(body)

"""``TestClient``: an application's routes on one kiq node in process, its tables given as dicts.

The app is ``create_app``'s, as ``kiq serve`` builds it, on a real node (``_node``): the
routing, the checks, the errors and the headers are kiq's own. Requests go to it through
ASGI, on an event loop of the client's own (a thread), so a test calls it synchronously.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote, urlencode

import jwt
import orjson

from kiq import Principal, Routes
from kiq.metrics import NodeMetrics
from kiq.node import Node, store_opener
from kiq.peers import Peers
from kiq.replicas import Materializer
from kiq.routing import Router
from kiq.security import Security, TokenCache, TokenVerifier
from kiq.security.keys import HMAC_ALGORITHMS
from kiq.server import KiqApp, create_app
from kiq.settings import LimitsSettings, ServeSettings
from kiq.tables import TableRuntime, TableSpec, codec_for
from kiq.tables.declared import Declared, spec_of
from kiq.testing._node import (
    DeadLetter,
    DeadLetters,
    NoPeers,
    Reader,
    Seat,
    Topics,
    Writer,
    Written,
    wait_caught_up,
)

NODE_ID = "kiq-testing"
URL = "http://kiq.testing"
TOKEN_TTL_S = 3600
_T = TypeVar("_T")


class _As(enum.Enum):
    CLIENT = "the client's principal"


AS_CLIENT: Literal[_As.CLIENT] = _As.CLIENT
Endpoints = Callable[[Routes], None] | str | Iterable[Callable[[Routes], None] | str]


def caller(subject: str, *scopes: str, **claims: Any) -> Principal:
    """A caller for ``TestClient(principal=...)``: ``subject`` (the token's ``sub``), its
    scopes (``kiq:read``, ``kiq:read:TABLE``, ``kiq:write``, ...) and any other claims the
    routes read (``Request.principal.claims``)."""
    words = frozenset(w for scope in scopes for w in scope.split())
    return Principal(subject, words, claims, 0.0)


@dataclass(frozen=True)
class Response:
    """What the node answered."""

    status_code: int
    headers: Mapping[str, str]  # by lower-case name; repeated headers joined with ", "
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return orjson.loads(self.content)


class TestClient:
    """One kiq node in process, serving ``tables`` and the routes ``endpoints`` declare.

    ``endpoints``: a function taking ``kiq.Routes`` (``routes(app)``), a target
    (``api.py:routes``, ``module:function``; a relative file is looked for beside ``base``
    first), or a list of them, as ``[app] endpoints`` names them. ``tables``: each served
    table by name, ``{key: value}``, a value stored as its JSON (``bytes`` as they are); a
    table the routes read that is not given is not served (404 ``unknown_table``), as on a
    node that does not serve it. ``principal`` (see ``caller``): the node checks tokens as
    one with ``--auth jwt`` does, and each request carries a token of this caller unless
    it names another (``principal=``; None: no token). ``auth=True`` without a principal:
    the node checks tokens and requests carry none unless they name a caller.
    ``declared``: the tables' declarations (``run_pipeline(...).declared``), so a table is
    served with its pipeline's key separator, window, TTL and rank field; a table without
    one is a plain table of its name.

    Use it in a ``with`` block (or ``start()`` and ``close()``): the node starts, loads the
    tables and is ready when the block begins, and stops when it ends. A request returns
    once its writes to a served table's topic are applied, so the next request reads them.
    """

    __test__ = False  # pytest: not a test class, whatever its name

    def __init__(
        self,
        endpoints: Endpoints = (),
        tables: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        principal: Principal | None = None,
        auth: bool | None = None,
        base: str | None = None,
        limits: LimitsSettings | None = None,
        declared: Iterable[Declared] = (),
    ) -> None:
        self.principal = principal
        self._auth = principal is not None if auth is None else auth
        if principal is not None and not self._auth:
            raise ValueError("a principal needs a node that checks tokens: leave auth unset")
        self._secret = secrets.token_bytes(32)
        self._home = Path(tempfile.mkdtemp(prefix="kiq-testing-"))
        self._topics = Topics()
        self._writer = Writer(self._topics)
        self._dead_letters = DeadLetters()
        self._node = self._make_node(tables or {}, {d.table: d for d in declared})
        security = Security(self._tokens(), None) if self._auth else None
        peers = Peers(NODE_ID, Router(NODE_ID), 2000, transport=NoPeers())
        named = [endpoints] if callable(endpoints) or isinstance(endpoints, str) else endpoints
        self.app: KiqApp = create_app(
            self._node,
            self._writer,
            peers,
            endpoints=list(named),
            base=base,
            limits=limits,
            security=security,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lifespan: _Lifespan | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> TestClient:
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="kiq-testing-loop", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        self._lifespan = _Lifespan(self.app)
        try:
            self._run(self._lifespan.start())
            wait_caught_up(self._node, self._topics)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        loop, thread, lifespan = self._loop, self._thread, self._lifespan
        self._loop = self._thread = self._lifespan = None
        try:
            if loop is not None and lifespan is not None and lifespan.started:
                asyncio.run_coroutine_threadsafe(lifespan.stop(), loop).result(60)
        finally:
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                loop.close()
            shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> TestClient:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | float] | None = None,
        json: Any = None,
        content: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        principal: Principal | Literal[_As.CLIENT] | None = AS_CLIENT,
        timeout_s: float = 30.0,
    ) -> Response:
        """One request; ``path`` may carry its query, ``params`` adds to it. The body is
        ``json`` (encoded, ``content-type: application/json``) or ``content``."""
        sent = {k.lower(): v for k, v in (headers or {}).items()}
        body = b""
        if json is not None:
            body = orjson.dumps(json)
            sent.setdefault("content-type", "application/json")
        elif content is not None:
            body = content.encode() if isinstance(content, str) else content
        who = self.principal if principal is AS_CLIENT else principal
        if who is not None and "authorization" not in sent:
            if not self._auth:
                raise ValueError("this client's node checks no tokens: give it a principal")
            sent["authorization"] = self.token(who)
        target = path
        if params:
            target += ("&" if "?" in path else "?") + urlencode(params)
        answer = self._run(_call(self.app, method.upper(), target, body, sent), timeout_s)
        wait_caught_up(self._node, self._topics)
        return answer

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Response:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Response:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Response:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Response:
        return self.request("DELETE", path, **kwargs)

    def token(self, principal: Principal) -> str:
        """An ``Authorization`` value this node accepts for ``principal``: a bearer token of
        its claims, ``sub`` and ``scope``, valid for an hour."""
        claims = {
            **principal.claims,
            "sub": principal.subject,
            "scope": " ".join(sorted(principal.scopes)),
            "exp": int(time.time()) + TOKEN_TTL_S,
        }
        return "Bearer " + jwt.encode(claims, self._secret, algorithm="HS256")

    # -- the node's side --------------------------------------------------------------

    @property
    def writes(self) -> list[Written]:
        """What the routes wrote (``Request.write``) and deleted (``Request.delete``), in order."""
        return list(self._writer.written)

    @property
    def dead_letters(self) -> list[DeadLetter]:
        """Records of the tables the node could not serve (a value that is not JSON, ...)."""
        return list(self._dead_letters.sent)

    @property
    def write_error(self) -> Exception | None:
        """Set it (``kiq.WriteFailed(...)``) and every write raises it, as when Kafka does not
        take a record; None again, and writes succeed."""
        return self._writer.error

    @write_error.setter
    def write_error(self, error: Exception | None) -> None:
        self._writer.error = error

    def load(self, table: str, rows: Mapping[str, Any]) -> None:
        """Writes ``rows`` (key → value; None deletes the key) to ``table``'s topic, as its
        pipeline would, and returns once the node has applied them."""
        runtime = self._node.tables.get(table)
        if runtime is None:
            raise KeyError(f"this client serves no table {table!r}: name it in tables=")
        for key, value in rows.items():
            self._topics.append(runtime.spec.topic, 0, key.encode(), _stored(value))
        if self._loop is not None:
            wait_caught_up(self._node, self._topics)

    # -- parts ----------------------------------------------------------------------------

    def _make_node(
        self, tables: Mapping[str, Mapping[str, Any]], declared: Mapping[str, Declared]
    ) -> Node:
        runtimes = {}
        for name in tables:
            spec = TableSpec(name, name, store="memory", standby_replicas=0)
            if name in declared:  # keyed, windowed and ranked as its pipeline declared it
                spec = replace(spec_of(declared[name]), store="memory", standby_replicas=0)
            runtimes[name] = TableRuntime(spec, codec_for(spec), 1)
        for name, rows in tables.items():
            topic = runtimes[name].spec.topic
            for key, value in rows.items():
                if value is not None:
                    self._topics.append(topic, 0, key.encode(), _stored(value))
        settings = ServeSettings(
            node_id=NODE_ID,
            advertise=URL,
            data_dir=self._home,
            standby_replicas=0,
            ready_max_lag=0,
            linger_s=0.0,
            view_refresh_ms=50,
        )
        metrics = NodeMetrics()
        materializer = Materializer(
            Reader(self._topics),  # type: ignore[arg-type]  # the reader's stand-in
            runtimes,
            store_opener(runtimes, self._home),
            self._dead_letters,  # type: ignore[arg-type]  # the sender's stand-in
            metrics,
            linger_s=0.0,
            watermark_interval_s=0.05,
        )
        seat = Seat(NODE_ID, URL, [(name, 0) for name in runtimes])
        return Node(settings, runtimes, materializer, metrics, seat, threading.Event())

    def _tokens(self) -> TokenCache:
        return TokenCache(TokenVerifier(_Secret(self._secret)))

    def _run(self, work: Coroutine[Any, Any, _T], timeout_s: float = 60.0) -> _T:
        if self._loop is None:
            work.close()
            raise RuntimeError("start the TestClient first: use it in a `with` block")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout_s)


class _Secret:
    """The key the node checks tokens with (``kiq.security.keys.Keys``): the client's secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def resolve(self, header: dict[str, Any]) -> tuple[Any, frozenset[str]]:
        return self._secret, HMAC_ALGORITHMS


def _stored(value: Any) -> bytes | None:
    """A table's value as its topic holds it: JSON, ``bytes`` as they are, None a tombstone."""
    if value is None or isinstance(value, bytes):
        return value
    return orjson.dumps(value)


class _Lifespan:
    """The ASGI lifespan of the app, as a server runs it: startup starts the node,
    shutdown stops it (and closes the peers and the writer)."""

    def __init__(self, app: KiqApp) -> None:
        self._app = app
        self.started = False
        self._inbox: asyncio.Queue[dict[str, Any]] | None = None
        self._outbox: asyncio.Queue[dict[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._inbox, self._outbox = asyncio.Queue(), asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._task = asyncio.ensure_future(self._app(scope, self._inbox.get, self._outbox.put))
        await self._inbox.put({"type": "lifespan.startup"})
        answer = await self._outbox.get()
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"kiq.testing: the node did not start: {answer.get('message')}")
        self.started = True

    async def stop(self) -> None:
        assert self._inbox is not None and self._outbox is not None and self._task is not None
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._outbox.get()
        await self._task
        self.started = False


async def _call(
    app: KiqApp, method: str, target: str, body: bytes, headers: Mapping[str, str]
) -> Response:
    """One request to ``app`` as a server makes it: ``target`` is path?query."""
    path, _, query = target.partition("?")
    raw_path = quote(path, safe="/%:@!$&'()*+,;=-._~").encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": raw_path,
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("kiq.testing", 80),
    }
    sent: list[dict[str, Any]] = []
    done = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await done.wait()
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    if start is None:
        raise RuntimeError(f"kiq.testing: {method} {target} got no response")
    out: dict[str, str] = {}
    for name, value in start.get("headers", []):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Response(start["status"], out, content)

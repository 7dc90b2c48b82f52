"""Who may call a route, and the 401/403 answers: the HTTP side of ``kiq.security``.

Each route declares its ``Rule`` (api/spec.py; the table is in routes.py). On a
node with authentication ``Access.check`` turns a rule into the check a ``Guard``
runs before the route's handler, as ``limits.Limit`` runs the rate limit:

    OPEN      nothing (health probes, /openapi.json; readiness's reason needs kiq:admin)
    CALLER    any valid token; an application's table reads then need read on each
              table, its writes kiq:write (``Request.tables``, ``lookup``, ``write``)
    READ      kiq:read or kiq:read:{table}, the table named in the path
    WRITE     kiq:write
    ADMIN     kiq:admin
    CLUSTER   a cluster credential made for this node: its form checked here, before
              the body is read; its MAC with the body, in the handler (``member``),
              naming the caller the first node verified, whose scopes apply

A path no route takes needs a caller all the same (a member under /v1/internal/):
fail closed. ``require_read`` and ``require_write`` refuse a request with no caller
on a node with authentication (``AUTH_ON`` in the scope), wherever it came from.
Bad credentials count against the client's address (``failures``): past the limit
a client is answered 429 before its next token is even decoded.

``Access`` only exists on a node with authentication or a cluster secret, and a rule
that needs nothing on the node gets no guard, so a node without pays nothing. The
verified caller goes into the ASGI scope as ``kiq.principal`` (a ``VerifiedCaller``) and
``kiq.subject`` (its ``sub``, a ``str``, what a rate limiter counts by).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from kiq.api.asgi import Receive, Scope, Send, header
from kiq.api.errors import (
    InsufficientScope,
    InvalidToken,
    NotClusterMember,
    RateLimited,
    Unauthorized,
    send_error,
)
from kiq.api.limits import Asgi, Lookup, RateLimiter, client_address
from kiq.api.spec import Rule
from kiq.metrics import RouteStats
from kiq.peers.wire import PRINCIPAL as PRINCIPAL_HEADER
from kiq.security import (
    ADMIN,
    CLUSTER_HEADER,
    WRITE,
    ClusterKey,
    CredentialRejected,
    TokenCache,
    TokenRejected,
    VerifiedCaller,
    read_scope,
)

PRINCIPAL = "kiq.principal"
SUBJECT = "kiq.subject"
AUTH_ON = "kiq.auth"
_AUTHORIZATION = b"authorization"
_CLUSTER = CLUSTER_HEADER.encode()
_STATEMENT = PRINCIPAL_HEADER.encode()

Check = Callable[[Scope], object]  # raises the answer when the caller may not go on


def caller(scope: Scope) -> VerifiedCaller | None:
    """The verified caller of this request; None on a node without authentication."""
    found: VerifiedCaller | None = scope.get(PRINCIPAL)
    return found


def forwarded_caller(scope: Scope) -> str | None:
    """What a request to a peer says of this request's caller (never its token)."""
    found: VerifiedCaller | None = scope.get(PRINCIPAL)
    return None if found is None else found.statement


def _verified(scope: Scope) -> VerifiedCaller | None:
    principal: VerifiedCaller | None = scope.get(PRINCIPAL)
    if principal is None and scope.get(AUTH_ON):
        raise Unauthorized("this node needs a bearer token: Authorization: Bearer TOKEN")
    return principal


def require_read(scope: Scope, table: str) -> None:
    principal = _verified(scope)
    if principal is not None and not principal.grants.may_read(table):
        raise InsufficientScope(read_scope(table))


def require_write(scope: Scope) -> None:
    principal = _verified(scope)
    if principal is not None and not principal.grants.write:
        raise InsufficientScope(WRITE)


class Access:
    """Bearer tokens on the public API (``tokens``), the cluster's HMAC on the internal
    paths (``cluster``, checked against this node's own advertised ``url``); either may
    be off. ``failures`` limits bad credentials per client address."""

    def __init__(
        self,
        tokens: TokenCache | None,
        cluster: ClusterKey | None,
        url: str = "",
        failures: RateLimiter | None = None,
    ) -> None:
        self._tokens = tokens
        self._cluster = cluster
        self._url = url
        self._failures = failures

    def authenticate(self, scope: Scope) -> VerifiedCaller:
        """The token's caller, put in the scope; 401 without a token we accept."""
        scope[AUTH_ON] = True
        authorization = None
        for name, value in scope["headers"]:
            if name == _AUTHORIZATION:
                authorization = value
                break
        assert self._tokens is not None
        failures = self._failures
        if failures is not None:
            wait = failures.would_wait(client_address(scope))
            if wait:  # a caller verified before still goes on; nothing new is checked
                known = None if authorization is None else self._tokens.cached(authorization)
                if known is None:
                    raise _too_many_failures(wait)
                scope[PRINCIPAL] = known
                scope[SUBJECT] = known.subject
                return known
        try:
            if authorization is None:
                raise Unauthorized("this node needs a bearer token: Authorization: Bearer TOKEN")
            try:
                principal = self._tokens.principal(authorization)
            except TokenRejected as exc:
                raise InvalidToken(exc.reason) from None
        except Unauthorized:
            if failures is not None:
                failures.retry_after(client_address(scope))
            raise
        scope[PRINCIPAL] = principal
        scope[SUBJECT] = principal.subject
        return principal

    def read(self, scope: Scope, table: str) -> None:
        """The hot path's check: a token that reads ``table``."""
        if self._tokens is not None and not self.authenticate(scope).grants.may_read(table):
            raise InsufficientScope(read_scope(table))

    def check(self, rule: Rule) -> Check | None:
        """What ``rule`` asks of a request on this node; None when nothing (no tokens, or
        an open route)."""
        if rule is Rule.CLUSTER:
            return self.check_form
        if self._tokens is None or rule is Rule.OPEN:
            return None
        return {
            Rule.CALLER: self.authenticate,
            Rule.READ: self._reads_path_table,
            Rule.WRITE: self._writes,
            Rule.ADMIN: self._admin,
        }[rule]

    def _reads_path_table(self, scope: Scope) -> None:
        table: str = scope["path_params"]["table"]
        if not self.authenticate(scope).grants.may_read(table):
            raise InsufficientScope(read_scope(table))

    def _writes(self, scope: Scope) -> None:
        if not self.authenticate(scope).grants.write:
            raise InsufficientScope(WRITE)

    def _admin(self, scope: Scope) -> None:
        if not self.authenticate(scope).grants.admin:
            raise InsufficientScope(ADMIN)

    def check_form(self, scope: Scope) -> None:
        """An internal request's credential, before its body is read: there, well formed, in
        its time window. A node with tokens and no cluster secret never starts."""
        if self._cluster is None:
            if self._tokens is not None:
                raise NotClusterMember("this node takes no node-to-node requests")
            return
        try:
            self._cluster.check_form(header(scope, _CLUSTER))
        except CredentialRejected as exc:
            raise NotClusterMember(exc.reason) from None

    def is_admin(self, scope: Scope) -> bool:
        """Whether the request carries a token with ``kiq:admin`` (an open route's extras)."""
        if self._tokens is None:
            return True
        for name, _ in scope["headers"]:
            if name == _AUTHORIZATION:
                try:
                    return self.authenticate(scope).grants.admin
                except (Unauthorized, RateLimited):
                    return False
        return False

    def member(
        self, scope: Scope, body: bytes, admin: bool = False, for_caller: bool = True
    ) -> None:
        """An internal request: from a member (the HMAC, made for this node), on behalf of
        the caller it names (with ``kiq:admin`` when ``admin``; none for a peer's own call,
        ``for_caller`` False)."""
        statement = header(scope, _STATEMENT)
        if self._cluster is not None:
            path: str = scope["path"]
            query: bytes = scope.get("query_string") or b""
            if query:
                path = f"{path}?{query.decode('latin-1')}"
            try:
                self._cluster.verify(
                    self._url, scope["method"], path, body, header(scope, _CLUSTER), statement
                )
            except CredentialRejected as exc:
                raise NotClusterMember(exc.reason) from None
        if self._tokens is not None and for_caller:
            scope[AUTH_ON] = True
            if statement is None:
                raise Unauthorized("a node-to-node request must name the caller it is made for")
            try:
                principal = VerifiedCaller.from_statement(statement)
            except TokenRejected as exc:
                raise InvalidToken(exc.reason) from None
            scope[PRINCIPAL] = principal
            scope[SUBJECT] = principal.subject
            if admin and not principal.grants.admin:
                raise InsufficientScope(ADMIN)

    def seal(self, scope: Scope, answer: bytes) -> bytes:
        """An internal answer as the asking member can believe it (``ClusterKey.seal``)."""
        credential = header(scope, _CLUSTER)
        if self._cluster is None or credential is None:
            return answer
        return self._cluster.seal(credential, answer)


class Guard:
    """An endpoint behind its route's check (a Starlette middleware: ``Route(...,
    middleware=[Middleware(Guard, check)])``); what the check raises is the answer."""

    __slots__ = ("_app", "_check")

    def __init__(self, app: Asgi, check: Check) -> None:
        self._app = app
        self._check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._check(scope)
        await self._app(scope, receive, send)


def guard_lookup(access: Access, rule: Rule, lookup: Lookup, stats: RouteStats) -> Lookup:
    """The raw lookup path behind ``rule`` (``READ``: of the table it names); unchanged when
    the rule needs nothing on this node. Answers its own refusals, as ``Lookups.get`` does,
    and counts them in the path's ``stats``, as every route's rule's are (api/counted.py)."""
    if rule is not Rule.READ:
        raise ValueError(f"the raw lookup path takes its table from the path, not {rule}")
    if access.check(rule) is None:
        return lookup
    read = access.read

    async def guarded(scope: dict[str, Any], send: Send, table: str, key: bytes) -> None:
        started = time.perf_counter()
        try:
            read(scope, table)
        except Exception as exc:
            stats.record(await send_error(send, exc, scope), time.perf_counter() - started)
            return
        await lookup(scope, send, table, key)

    return guarded


def _too_many_failures(wait_s: float) -> RateLimited:
    seconds = max(1, math.ceil(wait_s))
    return RateLimited(
        f"too many refused credentials from this address: try again in {seconds} s", seconds
    )

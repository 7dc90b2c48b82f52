"""Which request needs what, and the 401/403 answers: the HTTP side of ``kiq.security``.

    GET /v1/health/live, /v1/health/ready,     open
    GET /openapi.json
    /v1/tables/{table}/...                     kiq:read or kiq:read:{table}
    GET /v1/tables                             any valid token
    /v1/metadata, /metrics                     kiq:admin
    /v1/internal/*                             a cluster credential (checked with the body,
                                               in the handler), then the caller's token,
                                               whose scopes the handler applies per table
    anything else (an application's routes)    any valid token; its table reads need read
                                               on each table, its writes kiq:write
                                               (``Request.tables``, ``lookup``, ``write``)

``Access`` only exists on a node with authentication; the app picks its code path
once, so a node without pays nothing. The verified caller goes into the ASGI scope
as ``kiq.principal`` (a ``Principal``) and ``kiq.subject`` (its ``sub``, a ``str``,
what a rate limiter counts by).
"""

from __future__ import annotations

from kiq.api.asgi import Scope, header
from kiq.api.errors import InsufficientScope, InvalidToken, NotClusterMember, Unauthorized
from kiq.security import (
    ADMIN,
    CLUSTER_HEADER,
    WRITE,
    ClusterKey,
    CredentialRejected,
    Principal,
    TokenCache,
    TokenRejected,
    read_scope,
)

PRINCIPAL = "kiq.principal"
SUBJECT = "kiq.subject"
_AUTHORIZATION = b"authorization"
_CLUSTER = CLUSTER_HEADER.encode()
_OPEN = frozenset({"/v1/health/live", "/v1/health/ready", "/openapi.json"})
_ADMIN = frozenset({"/v1/metadata", "/metrics"})
_TABLES = "/v1/tables/"
_INTERNAL = "/v1/internal/"


def caller(scope: Scope) -> Principal | None:
    """The verified caller of this request; None on a node without authentication."""
    found: Principal | None = scope.get(PRINCIPAL)
    return found


def require_read(scope: Scope, table: str) -> None:
    principal: Principal | None = scope.get(PRINCIPAL)
    if principal is not None and not principal.grants.may_read(table):
        raise InsufficientScope(read_scope(table))


def require_write(scope: Scope) -> None:
    principal: Principal | None = scope.get(PRINCIPAL)
    if principal is not None and not principal.grants.write:
        raise InsufficientScope(WRITE)


class Access:
    """Bearer tokens on the public API (``tokens``), the cluster's HMAC on the internal
    paths (``cluster``); either may be off."""

    def __init__(self, tokens: TokenCache | None, cluster: ClusterKey | None) -> None:
        self._tokens = tokens
        self._cluster = cluster

    def authenticate(self, scope: Scope) -> Principal:
        """The token's caller, put in the scope; 401 without a token we accept."""
        authorization = None
        for name, value in scope["headers"]:
            if name == _AUTHORIZATION:
                authorization = value
                break
        if authorization is None:
            raise Unauthorized("this node needs a bearer token: Authorization: Bearer TOKEN")
        assert self._tokens is not None
        try:
            principal = self._tokens.principal(authorization)
        except TokenRejected as exc:
            raise InvalidToken(exc.reason) from None
        scope[PRINCIPAL] = principal
        scope[SUBJECT] = principal.subject
        return principal

    def read(self, scope: Scope, table: str) -> None:
        """The hot path's check: a token that reads ``table``."""
        if self._tokens is not None and not self.authenticate(scope).grants.may_read(table):
            raise InsufficientScope(read_scope(table))

    def admit(self, scope: Scope) -> None:
        """Every route but the raw lookup path and the internal ones: the rule above."""
        if self._tokens is None:
            return
        path: str = scope["path"]
        if path in _OPEN or path.startswith(_INTERNAL):
            return
        principal = self.authenticate(scope)
        if path in _ADMIN:
            if not principal.grants.admin:
                raise InsufficientScope(ADMIN)
        elif path.startswith(_TABLES):
            table = path[len(_TABLES) :].partition("/")[0]
            if not principal.grants.may_read(table):
                raise InsufficientScope(read_scope(table))

    def member(self, scope: Scope, body: bytes, admin: bool = False) -> None:
        """An internal request: from a member (the HMAC), on behalf of a caller whose token
        this node accepts too (with ``kiq:admin`` when ``admin``)."""
        if self._cluster is not None:
            path: str = scope["path"]
            query: bytes = scope.get("query_string") or b""
            if query:
                path = f"{path}?{query.decode('latin-1')}"
            try:
                self._cluster.verify(scope["method"], path, body, header(scope, _CLUSTER))
            except CredentialRejected as exc:
                raise NotClusterMember(exc.reason) from None
        if self._tokens is not None:
            principal = self.authenticate(scope)
            if admin and not principal.grants.admin:
                raise InsufficientScope(ADMIN)

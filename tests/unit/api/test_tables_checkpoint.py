"""GET /v1/tables shows where a table's pipeline checkpoints (a path on the pipeline's
machine) to ``kiq:admin`` callers only; every reader still sees the rest of the declaration."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from kiq.tables import TableRuntime, codec_for
from kiq.tables.declared import Declared, spec_of
from kiq.tables.versions import Alias
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, call, make_node

V2 = Declared(
    table="t", topic="t.v2", key=("k",), pipeline="orders", version="v2", checkpoint="/ck/orders@v2"
)


def declared_of(app: object, token: str | None) -> dict[str, object]:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    answer = asyncio.run(call(app, "GET", "/v1/tables", headers=headers))  # type: ignore[arg-type]
    assert answer.status == 200, answer.body
    (table,) = answer.json()["tables"]
    return dict(table["declared"])


def test_checkpoint_paths_are_shown_to_admins_only(tmp_path: Path):
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    security = Security(TokenCache(verifier), ClusterKey(b"g" * 32))
    local = make_node(tmp_path, Cluster(), {"t=t,standby=0": 2}, security=security)
    spec = spec_of(V2)
    local.node.add_table(TableRuntime(spec, codec_for(spec), 2))
    local.node.set_alias("t", Alias(table="t", version="v2"))
    reader = declared_of(local.app, hs256(scope="kiq:read"))
    assert "checkpoint" not in reader
    assert (reader["pipeline"], reader["version"]) == ("orders", "v2")
    admin = declared_of(local.app, hs256(scope="kiq:read kiq:admin"))
    assert admin["checkpoint"] == "/ck/orders@v2"
    # A node without tokens has no callers to tell apart: every caller is its operator.
    open_node = make_node(tmp_path / "open", Cluster(), {"t=t,standby=0": 2})
    open_node.node.add_table(TableRuntime(spec, codec_for(spec), 2))
    open_node.node.set_alias("t", Alias(table="t", version="v2"))
    assert declared_of(open_node.app, None)["checkpoint"] == "/ck/orders@v2"

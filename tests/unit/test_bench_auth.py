"""`kiq bench lookups --auth jwt`: the nodes' settings and wrk's token agree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiq import settings
from kiq.bench.auth import bench_auth
from kiq.security import security_for


def test_the_bench_token_is_accepted_by_nodes_started_with_its_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    auth = bench_auth(tmp_path / "secrets")
    for name, value in auth.env.items():
        monkeypatch.setenv(name, value)
    security = security_for(settings.load(settings.AuthSettings), "127.0.0.1")
    assert security.tokens is not None and security.cluster is not None
    principal = security.tokens.principal(auth.authorization.encode())
    assert principal.subject == "bench"
    assert principal.grants.read_all and principal.grants.admin
    assert auth.authorization == f"Bearer {auth.token}"
    assert oct(os.stat(tmp_path / "secrets" / "jwt.secret").st_mode & 0o777) == "0o600"

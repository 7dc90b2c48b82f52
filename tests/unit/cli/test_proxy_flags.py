"""`kiq proxy`'s flags reach the proxy it serves: its limits and the caller seal."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kiq.cli import proxy as proxy_cli
from kiq.cli.main import app
from kiq.proxy import ProxyApp


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ProxyApp]:
    """The app `kiq proxy` would serve, caught instead of served."""
    apps: list[ProxyApp] = []

    async def serve(app: ProxyApp, host: str, port: int) -> None:
        apps.append(app)

    import kiq.proxy

    monkeypatch.setattr(kiq.proxy, "serve_proxy", serve)
    monkeypatch.delenv("KIQ_TOKEN", raising=False)
    monkeypatch.delenv("KIQ_PROXY_TOKEN", raising=False)
    monkeypatch.delenv("KIQ_AUTH_CLUSTER_SECRET_FILE", raising=False)
    return apps


def run(*args: str, **env: Any) -> Any:
    return CliRunner().invoke(app, ["proxy", "--nodes", "http://127.0.0.1:9", *args], env=env)


def test_the_limits_flags_reach_the_proxy(served: list[ProxyApp]) -> None:
    result = run("--max-body-bytes", "1000", "--max-requests", "7", "--max-streams", "3")
    assert result.exit_code == 0, result.output
    limits = served[0].limits
    assert (limits.max_body_bytes, limits.max_requests, limits.max_streams) == (1000, 7, 3)
    assert limits.max_in_flight_bytes == proxy_cli._DEFAULTS.max_in_flight_bytes
    assert not served[0].seals_callers


def test_the_cluster_secret_file_makes_it_seal_callers(
    served: list[ProxyApp], tmp_path: Path
) -> None:
    secret = tmp_path / "cluster.secret"
    secret.write_text("ab" * 32)
    os.chmod(secret, 0o600)
    result = run(KIQ_AUTH_CLUSTER_SECRET_FILE=str(secret))
    assert result.exit_code == 0, result.output
    assert served[0].seals_callers


def test_a_world_writable_secret_is_refused_before_serving(
    served: list[ProxyApp], tmp_path: Path
) -> None:
    secret = tmp_path / "cluster.secret"
    secret.write_text("ab" * 32)
    os.chmod(secret, 0o666)
    result = run("--cluster-secret-file", str(secret))
    assert result.exit_code != 0
    assert served == []

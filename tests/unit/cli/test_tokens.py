"""No token on argv (kiq.cli.tokens): every command that sends a bearer token takes it from
``--token-file`` (refused when others may write it, a warning when they may read it) or
``KIQ_TOKEN``; ``--token`` still works, with a warning that ``ps`` shows it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import kiq.proxy
from kiq.cli import versions as versions_cli
from kiq.cli.main import app
from kiq.cli.tokens import bearer_token
from kiq.errors import ConfigError

runner = CliRunner()
A = "http://a:8080"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.e30.sig"


def token_file(tmp_path: Path, mode: int = 0o600, text: str = f"{TOKEN}\n") -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIQ_TOKEN", raising=False)
    monkeypatch.delenv("KIQ_PROXY_TOKEN", raising=False)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[httpx.Request]]:
    """The requests the version commands send (every one answered with an empty listing)."""
    requests: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"table": "bars", "current": "v1", "versions": []})

    monkeypatch.setattr(versions_cli, "transport", httpx.MockTransport(handle))
    yield requests


# -- the helper ----------------------------------------------------------------------------------


def test_a_token_file_is_read_and_stripped(tmp_path: Path):
    assert bearer_token(None, token_file(tmp_path)) == TOKEN


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_token_file_others_may_write_is_refused(tmp_path: Path, mode: int):
    with pytest.raises(ConfigError, match="writable by") as caught:
        bearer_token(None, token_file(tmp_path, mode))
    assert "chmod 600" in str(caught.value)


def test_a_token_file_others_may_read_is_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="kiq.security"):
        assert bearer_token(None, token_file(tmp_path, 0o644)) == TOKEN
    assert "may be read by other users (mode 644)" in caplog.text


def test_an_empty_or_missing_token_file_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="is empty"):
        bearer_token(None, token_file(tmp_path, text="\n"))
    with pytest.raises(ConfigError, match="cannot be read"):
        bearer_token(None, tmp_path / "nope")


def test_the_environment_then_the_deprecated_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    assert bearer_token(None, None) is None
    assert bearer_token("argv-token", None) == "argv-token"
    warned = " ".join(capsys.readouterr().err.split())
    assert "--token shows the token to every local user" in warned
    monkeypatch.setenv("KIQ_TOKEN", "env-token")
    assert bearer_token(None, None) == "env-token"
    assert bearer_token("argv-token", None) == "env-token", "the environment wins over argv"
    assert bearer_token(None, token_file(tmp_path)) == TOKEN, "a file wins over the environment"
    monkeypatch.setenv("KIQ_PROXY_TOKEN", "proxy-token")
    assert bearer_token(None, None, older_env=("KIQ_PROXY_TOKEN",)) == "proxy-token"
    with pytest.raises(ConfigError, match="give the token once"):
        bearer_token("argv-token", token_file(tmp_path))


# -- every command through it ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["versions", "bars"],
        ["switch", "bars", "v2"],
        ["retire", "bars", "v2"],
        ["diff", "bars", "--timeout", "0"],
    ],
)
def test_every_version_command_takes_a_token_file(sent, tmp_path: Path, command: list[str]):
    runner.invoke(app, [*command, "--url", A, "--token-file", str(token_file(tmp_path))])
    assert sent, "the command asked the node"
    assert sent[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("command", [["versions", "bars"], ["diff", "bars"]])
def test_a_writable_token_file_stops_the_command_before_any_request(
    sent, tmp_path: Path, command: list[str]
):
    result = runner.invoke(
        app, [*command, "--url", A, "--token-file", str(token_file(tmp_path, 0o666))]
    )
    assert result.exit_code != 0 and "writable by every user" in " ".join(result.stderr.split())
    assert "Traceback" not in result.output
    assert sent == []


def test_token_on_argv_still_works_with_a_warning(sent):
    result = runner.invoke(app, ["versions", "bars", "--url", A, "--token", "argv-token"])
    assert result.exit_code == 0, result.output
    assert sent[0].headers["authorization"] == "Bearer argv-token"
    assert "ps" in result.stderr and "--token-file" in result.stderr


def test_help_offers_the_token_file():
    for command in ("versions", "switch", "retire", "diff", "proxy"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--token-file" in result.output, command
        assert "deprecated" in result.output, command


class _Proxy:
    def __init__(self, urls: list[str], token: str | None = None, **_: Any) -> None:
        _Proxy.token = token


_Proxy.token = None  # type: ignore[attr-defined]


@pytest.fixture
def proxy_token(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Proxy]]:
    """`kiq proxy` with no server: the token its ProxyApp was given."""
    import uvloop

    async def serve(*_: Any) -> None:
        return None

    monkeypatch.setattr(kiq.proxy, "ProxyApp", _Proxy)
    monkeypatch.setattr(kiq.proxy, "serve_proxy", serve)
    monkeypatch.setattr(uvloop, "run", lambda coro: coro.close())
    _Proxy.token = None  # type: ignore[attr-defined]
    yield _Proxy


def test_proxy_takes_its_token_from_a_file_or_the_environment(
    proxy_token, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    result = runner.invoke(app, ["proxy", "--token-file", str(token_file(tmp_path))])
    assert result.exit_code == 0, result.output
    assert proxy_token.token == TOKEN
    monkeypatch.setenv("KIQ_TOKEN", "env-token")
    assert runner.invoke(app, ["proxy"]).exit_code == 0
    assert proxy_token.token == "env-token"
    monkeypatch.setenv("KIQ_PROXY_TOKEN", "proxy-token")  # its name from before, kept
    assert runner.invoke(app, ["proxy"]).exit_code == 0
    assert proxy_token.token == "proxy-token"


def test_proxy_refuses_a_token_file_others_may_write(proxy_token, tmp_path: Path):
    result = runner.invoke(app, ["proxy", "--token-file", str(token_file(tmp_path, 0o620))])
    assert result.exit_code == 1 and "writable by its group" in " ".join(result.stderr.split())
    assert proxy_token.token is None

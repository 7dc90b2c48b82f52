"""kiq's one HTTP client: its defaults (kiq's User-Agent, redirects only where asked, one
verification context made once) and its one error, which names the request and the failure."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from kiq import http_client
from kiq.errors import KiqError
from kiq.http_client import USER_AGENT, Gate, HttpError, get, send, send_stream, stream


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/here")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/cut":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"x" * 10)
        else:
            body = self.headers.get("User-Agent", "").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_requests_name_kiq_unless_the_caller_names_itself(server: str):
    assert USER_AGENT.startswith("kiq")
    assert get(f"{server}/ua", timeout_s=5).text == USER_AGENT
    own = get(f"{server}/ua", timeout_s=5, headers={"User-Agent": "kiq-setup"})
    assert own.text == "kiq-setup"


def test_get_follows_redirects_unless_told_not_to(server: str):
    assert get(f"{server}/moved", timeout_s=5).url.path == "/here"
    assert get(f"{server}/moved", timeout_s=5, follow_redirects=False).status_code == 302
    with http_client.sync_client(timeout=5) as client:
        assert send(client, "GET", f"{server}/moved").status_code == 302, "a client follows none"


def test_no_answer_is_one_error_naming_the_request_and_what_to_check(server: str):
    closed = server.rsplit(":", 1)[0] + ":1"
    with pytest.raises(HttpError) as caught:
        get(f"{closed}/v1/health/live", timeout_s=5, hint="is the node running?")
    error = caught.value
    assert isinstance(error, KiqError)
    assert error.url == f"{closed}/v1/health/live" and not error.timed_out and error.reason
    assert str(error).startswith(f"GET {closed}/v1/health/live: no answer (")
    assert str(error).endswith("; is the node running?")


def test_a_timeout_says_so():
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = http_client.sync_client(
        timeout=1, base_url="http://n1.test", transport=httpx.MockTransport(slow)
    )
    with pytest.raises(HttpError, match=r"GET http://n1.test/v1/x\?a=1: no answer in time") as c:
        send(client, "GET", "/v1/x", params={"a": "1"})
    assert c.value.timed_out


def test_a_body_cut_short_is_the_same_error(server: str):
    with (
        pytest.raises(HttpError, match=r"GET .*/cut: no answer"),
        stream(f"{server}/cut", timeout_s=5) as response,
    ):
        b"".join(response.iter_raw())


def test_default_verification_is_made_once():
    one = http_client.sync_client(timeout=1)
    two = http_client.sync_client(timeout=1)
    contexts = [c._transport._pool._ssl_context for c in (one, two)]  # type: ignore[attr-defined]
    assert contexts[0] is contexts[1]
    assert http_client.system_roots() is http_client.system_roots()


class _OnlyN1(Gate):
    def admit(self, request: httpx.Request) -> str | None:
        if request.url.host != "n1.test":
            return f"{request.url.host} is not trusted"
        request.headers["x-gate"] = "passed"
        return None


def test_a_gate_refuses_before_any_connection_and_marks_what_it_lets_through():
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    client = http_client.async_client(transport=_OnlyN1(httpx.MockTransport(answer)), timeout=1)

    async def run() -> tuple[int, str]:
        ok = await send_stream(client, client.build_request("GET", "http://n1.test/a"))
        await ok.aclose()
        try:
            await send_stream(client, client.build_request("GET", "http://n2.test/a"))
        except HttpError as exc:
            return ok.status_code, exc.reason
        finally:
            await client.aclose()
        return ok.status_code, ""

    status, refusal = asyncio.run(run())
    assert (status, refusal) == (204, "n2.test is not trusted")
    assert [str(r.url) for r in seen] == ["http://n1.test/a"]
    assert seen[0].headers["x-gate"] == "passed"
    assert seen[0].headers["user-agent"] == USER_AGENT

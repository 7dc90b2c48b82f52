"""Headless Chromium driven over the DevTools protocol, for tests of the pages kiq serves.

Debian's ``chromium`` package (``scripts/ensure-deps.sh`` installs it on CI), started
with a new empty profile and every background service off, so it asks nothing of the
network but the pages it is sent to. Spoken to over a websocket with aiohttp (a dev
dependency): navigate, evaluate, screenshot. The browser is this test's process and
its group ends with the test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

INSTALL = "apt-get install -y --no-install-recommends chromium (scripts/ensure-deps.sh does)"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


def chromium() -> str:
    """The browser's path; on a machine without it the test fails on CI, else is skipped."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = f"chromium is not installed: {INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


class Page:
    """One tab, spoken to over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        while True:  # events arrive between; only the answer to this call counts
            message = await self._ws.receive_json(timeout=30)
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    async def evaluate(self, expression: str) -> Any:
        """``expression``'s value in the page (JSON-able), awaited if it is a promise."""
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float, what: str) -> Any:
        """Until ``expression`` is truthy in the page; its value (an element: true)."""
        deadline = time.monotonic() + timeout_s
        value = None
        # An element comes back by value as {}, which Python finds false.
        found = f"(() => {{ const v = ({expression}); return v instanceof Node ? true : v; }})()"
        while time.monotonic() < deadline:
            value = await self.evaluate(found)
            if value:
                return value
            await asyncio.sleep(0.25)
        text = await self.evaluate("document.body.innerText")
        raise AssertionError(f"the page did not show {what} in {timeout_s:.0f}s:\n{text}")

    async def screenshot(self, path: Path, width: int = 1400) -> None:
        """The whole page, ``width`` wide, as a PNG."""
        height = await self.evaluate("document.documentElement.scrollHeight")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        await asyncio.sleep(0.3)  # a frame at the new size
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


@contextlib.asynccontextmanager
async def open_page(url: str, profile: Path, log_file: Path) -> AsyncIterator[Page]:
    """Chromium on a new empty profile, one tab at ``url``; ended, with its group, after."""
    profile.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        port = await _devtools_port(profile / "DevToolsActivePort", proc)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                tabs = await resp.json()
            tab = next(t for t in tabs if t["type"] == "page")
            async with http.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.send("Page.enable")
                await page.send("Page.navigate", url=url)
                yield page
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


async def _devtools_port(active: Path, proc: subprocess.Popen[bytes]) -> int:
    """The port Chromium chose, from the file it writes in its profile once it listens."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode}")
        if active.exists():
            first = active.read_text().splitlines()[:1]
            if first and first[0].isdigit():
                return int(first[0])
        await asyncio.sleep(0.1)
    raise AssertionError("chromium did not open its DevTools port in 30s")

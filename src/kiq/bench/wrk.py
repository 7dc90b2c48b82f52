"""Debian's ``wrk`` as the lookup load generator: a Lua script, one run, its output parsed.

wrk is a C event loop, so the load generator costs a fraction of what a Python
client would on the same two cores, and its latency histogram is exact. The
script draws a random request path per request from a file (one path a line)
and gives wrk thread ``i`` the ``i``-th target address, so one run can spread
its connections evenly over several nodes and still print one histogram; with a
path file per target, thread ``i`` draws from the ``i``-th.
Its ``done()`` adds what wrk does not print: p99.9 and, when asked, 307s.
"""

from __future__ import annotations

import dataclasses
import re
import resource
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiq.errors import SetupError

_SCRIPT = """\
-- written by kiq bench: random paths from a file, thread i -> target i
local targets = {{{targets}}}
local threads = {{}}

function setup(thread)
  local n = #threads + 1
  local target = targets[(n - 1) % #targets + 1]
  thread.addr = wrk.lookup(target[1], target[2])[1]
  thread:set("id", n)
  table.insert(threads, thread)
end

function init(args)
  local files = {{{paths}}}
  paths = {{}}
  for line in io.lines(files[(id - 1) % #files + 1]) do paths[#paths + 1] = line end
  math.randomseed(os.time() * 1000 + id)
  redirects = 0
end

function request()
  return wrk.format("GET", paths[math.random(#paths)])
end
{delay}{response}
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + (thread:get("redirects") or 0) end
  io.write(string.format("kiq-p999-us %d\\nkiq-redirects %d\\n", latency:percentile(99.9), total))
end
"""

_COUNT_307 = """
function response(status, headers, body)
  if status == 307 then redirects = redirects + 1 end
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    non_2xx: int  # wrk counts statuses above 399; a 307 is not one
    socket_errors: int
    redirects: int
    # wrk's own CPU seconds in the run: on a small machine the load generator shares the
    # cores it measures, and what it takes bounds what any server there can be shown doing.
    cpu_s: float = 0.0

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors


def wrk_executable() -> str:
    """The ``wrk`` on PATH, or a SetupError that says how to install it."""
    found = shutil.which("wrk")
    if found is None:
        raise SetupError(
            "`wrk` (the HTTP load generator) is not on PATH: run `make deps`, which installs "
            "it, or `apt-get install wrk`"
        )
    return found


def write_script(
    directory: Path,
    paths: Sequence[Sequence[str]],
    targets: list[tuple[str, int]],
    count_redirects: bool,
    delay_ms: float = 0.0,
    name: str = "wrk",
) -> Path:
    """The Lua script and its path files in ``directory``; one target per wrk thread,
    and ``paths[i]`` the paths of the threads on target ``i`` (one set: all of them).

    ``delay_ms``: each connection waits that long after an answer before its next request,
    so ``connections`` ask about ``connections * 1000 / delay_ms`` requests a second, not
    as many as the server can answer. ``name`` tells apart scripts in one directory."""
    files = []
    for i, each in enumerate(paths):
        files.append(directory / f"{name}-paths{i}.txt")
        files[-1].write_text("".join(p + "\n" for p in each))
    script = directory / (f"{name}-redirect.lua" if count_redirects else f"{name}.lua")
    script.write_text(
        _SCRIPT.format(
            targets=", ".join(f'{{"{host}", "{port}"}}' for host, port in targets),
            paths=", ".join(f'"{f}"' for f in files),
            delay=f"\nfunction delay()\n  return {delay_ms:g}\nend\n" if delay_ms > 0 else "",
            response=_COUNT_307 if count_redirects else "",
        )
    )
    return script


def run_wrk(
    script: Path,
    targets: list[tuple[str, int]],
    connections: int,
    duration_s: float,
    headers: Sequence[str] = (),
) -> WrkResult:
    """One wrk run, a thread per target; ``connections`` (at least one per thread) split evenly.

    ``headers`` (``Name: value``) go with every request.
    """
    threads = len(targets)
    host, port = targets[0]
    cmd = [wrk_executable(), f"-t{threads}", f"-c{max(connections, threads)}"]
    for header in headers:
        cmd += ["-H", header]
    cmd += [f"-d{max(1, round(duration_s))}s", "--latency", "--timeout", "5s"]
    cmd += ["-s", str(script), f"http://{host}:{port}/"]
    before = _children_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60, check=False)
    if out.returncode != 0:
        raise SetupError(
            f"wrk failed (exit {out.returncode}): {(out.stderr or out.stdout)[-2000:]}"
        )
    return dataclasses.replace(parse(out.stdout), cpu_s=_children_cpu() - before)


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children that have ended (wrk among them)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match[1]) * _UNIT_MS[match[2]]


def parse(output: str) -> WrkResult:
    """The figures of wrk's ``--latency`` report plus the lines the script's ``done()`` wrote."""

    def one(pattern: str, default: str | None = None) -> str:
        match = re.search(pattern, output, re.MULTILINE)
        if match is None:
            if default is None:
                raise ValueError(f"wrk output without {pattern!r}:\n{output}")
            return default
        return match[1]

    socket = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return WrkResult(
        requests=int(one(r"^\s*(\d+) requests in")),
        rps=float(one(r"^Requests/sec:\s*([\d.]+)")),
        p50_ms=_ms(one(r"^\s*50%\s+(\S+)")),
        p75_ms=_ms(one(r"^\s*75%\s+(\S+)")),
        p90_ms=_ms(one(r"^\s*90%\s+(\S+)")),
        p99_ms=_ms(one(r"^\s*99%\s+(\S+)")),
        p999_ms=int(one(r"^kiq-p999-us (\d+)")) / 1000,
        non_2xx=int(one(r"Non-2xx or 3xx responses: (\d+)", "0")),
        socket_errors=sum(int(n) for n in socket.groups()) if socket else 0,
        redirects=int(one(r"^kiq-redirects (\d+)", "0")),
    )

"""Every process kiq starts and stops goes through ``kiq.runtime.processes``.

Starting: no ``Popen`` (``subprocess.Popen(...)``, a bare ``Popen(...)``, an imported
``Popen``), ``os.fork``/``os.spawn*``/``os.exec*`` or ``asyncio.create_subprocess_*``
anywhere in ``src/kiq`` but that module, so one place decides what a child inherits (the
run's mark of ``kiq.runtime.reaper`` with the environment, stdin closed, its session).

``subprocess.run`` stays allowed: it runs a short command to its end and captures its
output (``javac``, ``git``, the broker's storage format, ``df``, ``umount``, ``wrk``),
nothing that outlives the call and has to be stopped.

Stopping: no ``os.killpg``, ``.send_signal(...)`` or ``.terminate()`` outside that module;
``os.kill`` only where the test names why (the reaper ends by mark from a watchdog that
imports nothing of kiq; a chaos bench pauses and resumes a node with SIGSTOP/SIGCONT).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "kiq"
DOOR = SRC / "runtime" / "processes.py"

# os.kill allowed here, and why (see the module docstring)
OS_KILL_ALLOWED = {
    "runtime/reaper.py": "ends processes by mark, from a watchdog importing nothing of kiq",
    "bench/chaos_nodes.py": "SIGSTOP/SIGCONT: pauses a node, does not stop it",
}


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))]


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain on a name, the attribute alone otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else f".{node.attr}"
    return ""


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(SRC.parent)}:{getattr(node, 'lineno', 0)}"


def _lined(nodes: list[ast.AST]) -> list[ast.AST]:
    return sorted(nodes, key=lambda n: getattr(n, "lineno", 0))


def _starts(tree: ast.Module) -> list[ast.AST]:
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
            found += [node] if any(a.name == "Popen" for a in node.names) else []
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        if (
            last == "Popen"
            or name in ("os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp")
            or (name.startswith("os.") and last.startswith(("spawn", "exec")))
            or last in ("create_subprocess_exec", "create_subprocess_shell")
        ):
            found.append(node)
    return found


def _stops(path: Path, tree: ast.Module) -> list[ast.AST]:
    rel = str(path.relative_to(SRC))
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        if (
            name == "os.killpg"
            or last == "send_signal"
            or (last == "terminate" and not node.args and "." in name)
            or (name == "os.kill" and rel not in OS_KILL_ALLOWED)
        ):
            found.append(node)
    return found


def test_no_process_is_started_outside_the_process_module():
    found = [_where(p, n) for p, tree in _modules() if p != DOOR for n in _lined(_starts(tree))]
    assert not found, "start it with kiq.runtime.processes.spawn:\n" + "\n".join(found)


def test_no_process_is_stopped_outside_the_process_module():
    found = [_where(p, n) for p, tree in _modules() if p != DOOR for n in _lined(_stops(p, tree))]
    assert not found, "stop it with kiq.runtime.processes.stop:\n" + "\n".join(found)


def test_the_scan_sees_what_it_looks_for():
    """The checks catch each form they name (so a passing test is not a blind one)."""
    source = (
        "import os, subprocess\n"
        "from subprocess import Popen\n"
        "subprocess.Popen(['x'])\n"
        "Popen(['x'])\n"
        "os.fork()\n"
        "os.execv('x', [])\n"
        "proc.send_signal(15)\n"
        "os.killpg(1, 9)\n"
        "proc.terminate()\n"
        "os.kill(1, 9)\n"
        "subprocess.run(['javac'])\n"
    )
    tree = ast.parse(source)
    assert [getattr(n, "lineno", 0) for n in _starts(tree)] == [2, 3, 4, 5, 6]
    assert sorted(getattr(n, "lineno", 0) for n in _stops(SRC / "x.py", tree)) == [7, 8, 9, 10]
    assert _stops(SRC / "runtime" / "reaper.py", ast.parse("os.kill(1, 9)\n")) == []

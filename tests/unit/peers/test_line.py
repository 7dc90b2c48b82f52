"""A forwarded lookup runs down one line, ``forward → hedge → batch → send``: each stage is
built with the next, and none calls back up (no import, no name, no callback of a stage
before it). The answers come back through the race handed down with each lookup."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect

from kiq.peers import Peers
from kiq.peers.batcher import LookupBatcher
from kiq.peers.hedging import Hedger
from kiq.peers.probes import Probes
from kiq.peers.sender import Sender
from kiq.routing import Router

# The stages, top to bottom; the probes hang off the hedger and call only the sender.
LINE = ["kiq.peers.client", "kiq.peers.hedging", "kiq.peers.batcher", "kiq.peers.sender"]
ABOVE = {
    "kiq.peers.client": [],
    "kiq.peers.hedging": ["kiq.peers.client"],
    "kiq.peers.probes": ["kiq.peers.client", "kiq.peers.hedging", "kiq.peers.batcher"],
    "kiq.peers.batcher": ["kiq.peers.client", "kiq.peers.hedging", "kiq.peers.probes"],
    "kiq.peers.sender": [
        "kiq.peers.client",
        "kiq.peers.hedging",
        "kiq.peers.probes",
        "kiq.peers.batcher",
    ],
}


def top_level_names(module: str) -> set[str]:
    """The classes, functions and constants a module defines (what a stage below could use)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - {"T", "log"}


def upward(source: str, above: list[str]) -> list[str]:
    """What in ``source`` reaches a module ``above`` it: imports of it, or its names used."""
    tree = ast.parse(source)
    forbidden_names = set().union(*(top_level_names(m) for m in above)) if above else set()
    found: list[str] = []
    for node in ast.walk(tree):  # function-level imports and annotations included
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in above]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in above:
                found.append(node.module)
            for alias in node.names:
                if f"{node.module}.{alias.name}" in above or alias.name in forbidden_names:
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Name) and node.id in forbidden_names:
            found.append(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in forbidden_names:
            found.append(node.attr)
        elif isinstance(node, ast.Constant) and node.value in forbidden_names:
            found.append(str(node.value))  # a quoted annotation
    return found


def test_no_stage_imports_or_names_a_stage_before_it() -> None:
    for module, above in ABOVE.items():
        source = inspect.getsource(importlib.import_module(module))
        assert upward(source, above) == [], f"{module} reaches back up the line"


def test_the_check_catches_a_sender_that_reaches_back_up() -> None:
    above = ABOVE["kiq.peers.sender"]
    assert upward("from kiq.peers.hedging import Hedger", above)
    assert upward("import kiq.peers.batcher", above)
    assert upward("from kiq.peers import client", above)
    assert upward("def f(x: 'LookupRace') -> None: ...", above)
    assert upward("def f(x):\n    return isinstance(x, LookupBatcher)", above)
    assert upward("def f(x):\n    from kiq.peers.client import Peers", above)
    assert not upward("from kiq.peers.wire import Lookup", above)


def test_each_stage_is_built_with_the_next_and_holds_nothing_before_it() -> None:
    async def built() -> None:
        peers = Peers("n1", Router("n1"), 1000, channels=False)
        try:
            hedger, batcher, sender = peers._hedger, peers._batcher, peers._sender
            assert isinstance(hedger, Hedger) and isinstance(batcher, LookupBatcher)
            assert isinstance(sender, Sender) and isinstance(peers._probes, Probes)
            # Each stage hands on to the next one, and only to it.
            assert getattr(hedger._send, "__self__", None) is batcher
            assert getattr(batcher._send_batch, "__self__", None) is sender
            stages = [peers, hedger, batcher, sender]
            for i, stage in enumerate(stages[1:], 1):
                for held in vars(stage).values():
                    owner = getattr(held, "__self__", held)
                    assert not any(owner is up for up in stages[:i]), (stage, held)
            for held in vars(peers._probes).values():
                owner = getattr(held, "__self__", held)
                assert not any(owner is up for up in (peers, hedger, batcher))
        finally:
            peers.close()

    asyncio.run(built())

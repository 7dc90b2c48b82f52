"""Shared test set-up: integration tests are marked by where they live, and the run stops
when asked, leaving no process behind.

Every process the run starts (brokers, Spark, nodes, pipelines and what they start) carries
the run's mark (``kiq.runtime.reaper``); what still carries it is ended after the session's
own teardown, at exit and, should pytest itself be killed, by a watchdog. SIGTERM unwinds
the run as Ctrl-C does, fixtures torn down. A run started with SIGINT ignored (as a shell
starts a job in the background) gets Ctrl-C back: a Ctrl-C to its process group then
stopped only the children with handlers of their own (nodes, wrk), the test then running
failed on their exit, and the run went on.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Generator
from pathlib import Path
from types import FrameType

import pytest

from kiq.runtime.reaper import Watchdog, add_mark, end_marked

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is: pytest stops on it as on a Ctrl-C."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signal.Signals(signum).name}")


class _Stopper:
    """The run's mark, its watchdog, and the end of whatever carries the mark."""

    def __init__(self) -> None:
        self.mark = add_mark()
        self.watchdog = Watchdog(self.mark)
        self._ended = False
        self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.take_signals()
        atexit.register(self.end)

    def take_signals(self) -> None:
        """SIGTERM raises, Ctrl-C is not ignored: again before each test, so that one which
        left a handler of its own behind (``run_targets`` in-process does) cannot keep them."""
        if not self._ended:
            signal.signal(signal.SIGTERM, _terminate)
            if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    def end(self) -> None:
        """Once: end what carries the mark; a signal meanwhile cuts the grace short."""
        if self._ended:
            return
        self._ended = True
        hurry = threading.Event()
        for sig in self._previous:
            signal.signal(sig, lambda *_: hurry.set())
        try:
            end_marked(self.mark, spare=[self.watchdog.pid], hurry=hurry)
            self.watchdog.close()
        finally:
            for sig, handler in self._previous.items():  # as they were before the run
                if handler is not None:  # None: not set from Python, nothing to put back
                    signal.signal(sig, handler)


_STOPPER = pytest.StashKey[_Stopper]()


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():  # where signals are handled
        config.stash[_STOPPER] = _Stopper()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    try:
        return (yield)  # fixtures torn down: the broker stopped as it should be
    finally:
        if _STOPPER in session.config.stash:
            session.config.stash[_STOPPER].end()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _STOPPER in item.config.stash:
        item.config.stash[_STOPPER].take_signals()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STOPPER in config.stash:
        config.stash[_STOPPER].end()

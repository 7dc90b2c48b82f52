"""A whole application on one machine: a broker, pipelines, serving nodes and feeds.

One builder for `kiq up` (and `kiq demo`), the benchmarks and the tests, so each lays its
processes out alike under one ``home``: the broker's data where its settings say (the
benchmarks put it in ``home/broker``), the pipelines' checkpoints in ``home/checkpoints``
and their log in ``home/pipeline.log``, node ``ID``'s data in ``home/ID`` and its log in
``home/ID.log``, feed ``N``'s log in ``home/feedN.log``.

They start in that order (broker, pipelines, nodes, feeds), each when its caller says, as
each caller waits on different things in between; ``stop`` stops them in reverse, every
one of them even when stopping another failed, however the run ended (the context manager
stops on the way out of its block).
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kiq.runtime import processes
from kiq.runtime.broker import LocalBroker
from kiq.runtime.nodes import LocalNode
from kiq.runtime.pipelines import LocalPipeline

# A feed is a user's producer: told to stop, it has this long to flush.
FEED_STOP_S = 10.0


@dataclass
class LocalStack:
    """The processes of one local application, registered as they are made.

    ``broker``: the one to start, or None for a Kafka that runs elsewhere (``bootstrap``).
    A process registered here is stopped by ``stop`` whether it started or not.
    """

    home: Path
    broker: LocalBroker | None = None
    external_bootstrap: str | None = None
    pipelines: list[LocalPipeline] = field(default_factory=list)
    nodes: list[LocalNode] = field(default_factory=list)
    feeds: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # A broker that ran before the stack started it (another run's) is left running.
    broker_was_running: bool = False

    @property
    def bootstrap(self) -> str:
        if self.external_bootstrap is not None:
            return self.external_bootstrap
        if self.broker is None:
            raise ValueError("a stack needs a broker or a bootstrap")
        return self.broker.bootstrap

    def __enter__(self) -> Self:
        self.home.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- start, in this order -----------------------------------------------------------

    def start_broker(self, *, adopt: bool = False) -> None:
        """Start the broker (no-op without one). ``adopt``: one found running already is
        used as it is, and left running by ``stop``."""
        if self.broker is None:
            return
        if adopt:
            self.broker_was_running = self.broker.status().running
        self.broker.start()

    def pipeline(self, targets: Sequence[str], **options: Any) -> LocalPipeline:
        """A Spark driver running ``targets``, registered, not started (``LocalPipeline``'s
        ``options``: trigger, partitions, env, ...)."""
        made = LocalPipeline(
            tuple(targets),
            self.bootstrap,
            self.home / "checkpoints",
            self.home / "pipeline.log",
            **options,
        )
        self.pipelines.append(made)
        return made

    def node(
        self,
        node_id: str,
        tables: Sequence[str] = (),
        data_dir: Path | None = None,
        **options: Any,
    ) -> LocalNode:
        """Serving node ``node_id``, registered, not started; its data in ``data_dir``
        (a disk of its own) or ``home/ID`` (``LocalNode``'s ``options``: port, extra_args,
        env, tls, workers, ...)."""
        made = LocalNode(
            node_id,
            self.bootstrap,
            list(tables),
            data_dir if data_dir is not None else self.home / node_id,
            self.home / f"{node_id}.log",
            **options,
        )
        self.nodes.append(made)
        return made

    def feed(
        self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Path:
        """Start a feed's command, in a session of its own (a Ctrl-C to ours misses it: it
        is stopped by ``stop``, after); its log file. Raises ``OSError`` if it cannot start."""
        log_file = self.home / f"feed{len(self.feeds) + 1}.log"
        proc = processes.spawn(argv, log_file=log_file, env=env, new_session=True, cwd=cwd)
        self.feeds.append(proc)
        return log_file

    # -- stop ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Feeds, nodes, pipelines, then the broker (unless it ran before): the reverse of
        their start. One that fails to stop does not keep the rest running; the first
        error is raised once all were told."""
        steps: list[Callable[[], object]] = [functools.partial(_end, f) for f in self.feeds]
        steps += [node.stop for node in self.nodes]
        steps += [pipeline.stop for pipeline in self.pipelines]
        if self.broker is not None and not self.broker_was_running:
            steps.append(self.broker.stop)
        first: Exception | None = None
        for step in steps:
            try:
                step()
            except Exception as exc:  # the others still stop
                first = first or exc
        if first is not None:
            raise first


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        processes.stop(proc, grace_s=FEED_STOP_S)

"""Why a pipeline's driver stopped, said once: on its terminal, in its log, and in a small
JSON file beside its log where `kiq up` finds it without reading Spark's log lines.

The driver (`kiq pipeline run`) writes the file named by ``KIQ_PIPELINE_ERROR_FILE`` when it
stops on an error; ``kiq.runtime.pipelines.LocalPipeline`` hands it that name and reads it back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from kiq.errors import KiqError

__all__ = ["ERROR_FILE_ENV", "PipelineFailed", "PipelineFailure", "brief", "raised_at"]

ERROR_FILE_ENV = "KIQ_PIPELINE_ERROR_FILE"

# Spark appends a query's plan to its exception, and py4j the JVM's frames: the terminal
# gets the cause alone, the log has it whole.
_PLAN_MARKER = "=== Streaming Query ==="
_JVM_TRACE = "JVM stacktrace:"
_PY_TRACE = "Traceback (most recent call last):"
BRIEF_LINES = 12


def brief(error: str) -> str:
    """An exception's message as a terminal shows it: without the query plan, the JVM's
    frames or a Python worker's traceback (its last line, the error, stays), at most
    ``BRIEF_LINES`` lines."""
    text = error.split(_PLAN_MARKER, 1)[0].split(_JVM_TRACE, 1)[0].strip()
    lines: list[str] = []
    in_traceback = False
    for line in text.splitlines():
        if _PY_TRACE in line:
            in_traceback = True
            line = line.split(_PY_TRACE, 1)[0]
        elif in_traceback and line[:1].isspace():
            continue  # a frame of the traceback, or its code
        else:
            in_traceback = False
        if line.strip() and not line.lstrip().startswith(("at ", "... ")):
            lines.append(line.rstrip())
    if len(lines) > BRIEF_LINES:
        lines = [*lines[:BRIEF_LINES], f"... ({len(lines) - BRIEF_LINES} more lines in the log)"]
    return "\n".join(lines) or "(no message)"


def raised_at(exc: BaseException) -> str:
    """Where the application's own code raised ``exc`` (``build.py:12 in build``): the
    deepest frame outside kiq and PySpark, or "" when every frame is theirs."""
    libraries = tuple(_package_dirs("kiq", "pyspark", "py4j"))
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not f.filename.startswith(libraries)]
    if not own:
        return ""
    frame = own[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


def _package_dirs(*names: str) -> list[str]:
    """Where each package installed is (not imported: PySpark is heavy)."""
    found = []
    for name in names:
        spec = importlib.util.find_spec(name)
        found += list(spec.submodule_search_locations or []) if spec is not None else []
    return [str(Path(d)) + os.sep for d in found]


@dataclass(frozen=True)
class PipelineFailure:
    """What stopped a pipeline: its query's failure, or its own code's error (``query`` "")."""

    pipeline: str
    error: str  # the exception's class: StreamingQueryException, ValueError, ConfigError
    message: str  # brief: the first useful lines, not the plan or the JVM's frames
    query: str = ""
    hint: str = ""  # what kiq knows to do about it (a stale checkpoint, say)

    def summary(self) -> str:
        """The one message a terminal shows: ``pipeline P stopped: query Q failed: ...``."""
        what = f"query {self.query} failed: " if self.query else ""
        return f"pipeline {self.pipeline} stopped: {what}{self.message}{self.hint}"

    def log_line(self) -> str:
        """One line to grep for (``pipeline failed``); the message's further lines after it."""
        first, _, rest = self.message.partition("\n")
        line = (
            f"pipeline failed pipeline={self.pipeline} query={self.query or '-'} "
            f"error={self.error} message={first}"
        )
        return f"{line}\n{rest}" if rest else line

    def write(self, path: Path) -> None:
        """The file `kiq up` reads: written whole (a rename), so never read half-written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(asdict(self), indent=2) + "\n")
        part.replace(path)

    @classmethod
    def read(cls, path: Path) -> PipelineFailure | None:
        """The failure the driver left at ``path``, or None (none, or not readable)."""
        try:
            data = json.loads(path.read_text())
            return cls(**{k: str(data[k]) for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None


class PipelineFailed(KiqError):
    """A pipeline stopped on an error; its message is the failure's summary."""

    def __init__(self, failure: PipelineFailure) -> None:
        super().__init__(failure.summary())
        self.failure = failure

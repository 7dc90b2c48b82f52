"""Finding a Java 17+ runtime for the broker and for Spark."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from kiq.errors import SetupError

MIN_JAVA = 17

_FIX = "install a JDK 17+ (`make deps` does it on Debian) or set JAVA_HOME"


@cache
def java_executable() -> Path:
    """The `java` to run: $JAVA_HOME/bin/java, else the one on PATH; version 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is None or not candidate.exists():
        found = shutil.which("java")
        if found is None:
            raise SetupError(f"no `java` found on PATH or in $JAVA_HOME: {_FIX}")
        candidate = Path(found)
    version = _major_version(candidate)
    if version < MIN_JAVA:
        raise SetupError(f"{candidate} is Java {version}; kiq needs {MIN_JAVA}+: {_FIX}")
    return candidate


def _major_version(java: Path) -> int:
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise SetupError(f"cannot run {java}: {exc}: {_FIX}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise SetupError(f"cannot tell the Java version of {java}: {_FIX}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major

"""Fetching kiq's pinned JVM jars from a Maven repository, each checked against its SHA-256.

The manifest, ``jvm/jars.lock.json`` beside this module (package data), lists every jar of
each set (``kafka``: the broker and its runtime dependencies; ``spark``: Spark's Kafka
connector and the jars pyspark lacks) as Maven coordinates with its size and SHA-256.
``scripts/lock_jars.py`` writes it from ``jvm/*/pom.xml``, which stay the source of the
versions. A jar is downloaded into a temporary file beside its place, checked, and only then
renamed to its name: a jar under its name is whole and was verified when it was written.
Jars already there with the right checksum are kept; jars a set no longer lists are removed
(the broker's classpath is the whole directory).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from kiq.errors import SetupError
from kiq.http_client import HttpError, stream, system_roots

DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2/"
REPOSITORY_ENV = "KIQ_MAVEN_REPOSITORY"
MANIFEST = "jvm/jars.lock.json"  # under the kiq.runtime package
_CHUNK = 1 << 16
_ATTEMPTS = 3  # a dropped connection is tried again; a wrong checksum is not


@dataclass(frozen=True)
class Jar:
    """One pinned jar: where Maven keeps it, and what it must hash to."""

    group: str
    artifact: str
    version: str
    size: int
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        path = "/".join((*self.group.split("."), self.artifact, self.version, self.file_name))
        return f"{repository.rstrip('/')}/{path}"


@dataclass(frozen=True)
class JarSet:
    """The jars of one subdirectory of the jar cache."""

    name: str
    description: str
    jars: tuple[Jar, ...]

    @property
    def size(self) -> int:
        return sum(j.size for j in self.jars)


@dataclass(frozen=True)
class SetCheck:
    """How a set's directory compares with the manifest."""

    missing: tuple[Jar, ...]
    wrong: tuple[Jar, ...]  # there, but another size or checksum
    stale: tuple[Path, ...]  # jars the set does not list

    @property
    def complete(self) -> bool:
        return not (self.missing or self.wrong or self.stale)


@cache
def load_manifest() -> dict[str, JarSet]:
    """The sets of the shipped manifest, by name."""
    text = resources.files("kiq.runtime").joinpath(MANIFEST).read_text(encoding="utf-8")
    return parse_manifest(json.loads(text))


def parse_manifest(data: dict[str, object]) -> dict[str, JarSet]:
    sets = data.get("sets")
    if not isinstance(sets, dict):
        raise SetupError("the jar manifest has no sets: regenerate it (scripts/lock_jars.py)")
    found = {}
    for name, body in sets.items():
        jars = []
        for entry in body["jars"]:
            group, artifact, version = entry["coordinates"].split(":")
            jars.append(Jar(group, artifact, version, int(entry["size"]), entry["sha256"]))
        found[name] = JarSet(name, body["description"], tuple(jars))
    return found


def repository_url(given: str | None = None) -> str:
    """The Maven repository to fetch from: ``given``, else $KIQ_MAVEN_REPOSITORY, else Central."""
    url = given or os.environ.get(REPOSITORY_ENV) or DEFAULT_REPOSITORY
    if urllib.parse.urlsplit(url).scheme not in ("https", "http", "file"):
        raise SetupError(
            f"the Maven repository {url!r} is not an https://, http:// or file:// URL: "
            f"fix --repository or {REPOSITORY_ENV}"
        )
    return url.rstrip("/") + "/"


def say(console: Console, text: str) -> None:
    """A line as it is: no markup, emoji (``org.example:a:1.0``) or wrapping of paths."""
    console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_set(directory: Path, jar_set: JarSet, verify: bool = True) -> SetCheck:
    """Compare ``directory`` with the set: by checksum with ``verify``, else by size (quick)."""
    missing, wrong = [], []
    for jar in jar_set.jars:
        path = directory / jar.file_name
        if not path.is_file():
            missing.append(jar)
        elif path.stat().st_size != jar.size or (verify and sha256_of(path) != jar.sha256):
            wrong.append(jar)
    listed = {j.file_name for j in jar_set.jars}
    stale = sorted(p for p in directory.glob("*.jar") if p.name not in listed)
    return SetCheck(tuple(missing), tuple(wrong), tuple(stale))


def fetch_set(
    directory: Path, jar_set: JarSet, repository: str, console: Console, bar: bool = True
) -> SetCheck:
    """Make ``directory`` hold exactly the set's jars, verified; what it found before.

    ``console`` gets a line for each jar fetched, and with ``bar`` a progress bar (on a
    terminal) under them.
    """
    directory.mkdir(parents=True, exist_ok=True)
    found = check_set(directory, jar_set)
    for path in found.stale:
        say(console, f"removing {path}: the {jar_set.name} set does not list it")
        path.unlink()
    todo = [*found.missing, *found.wrong]
    if not todo:
        return found
    size = sum(j.size for j in todo)
    say(
        console,
        f"fetching {len(todo)} jar{'s' if len(todo) > 1 else ''} ({size / 1e6:.1f} MB) of the "
        f"{jar_set.name} set from {repository} into {directory}",
    )
    with _progress(console, bar) as progress:
        task = progress.add_task(jar_set.name, total=size)
        for jar in todo:
            progress.update(task, description=jar.file_name)
            download(
                jar, repository, directory / jar.file_name, lambda n: progress.advance(task, n)
            )
            say(progress.console, f"  {jar.coordinates}  {jar.size / 1e6:.1f} MB")
    return found


def _progress(console: Console, bar: bool) -> Progress:
    return Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not (bar and console.is_terminal),
    )


def download(jar: Jar, repository: str, dest: Path, advance: Callable[[int], None]) -> None:
    """Fetch ``jar`` to ``dest`` atomically; a checksum other than the manifest's is refused."""
    url = jar.url(repository)
    for attempt in range(1, _ATTEMPTS + 1):
        counted = _Counted(advance)
        try:
            _download_once(jar, url, dest, counted)
            return
        except (_Refused, HttpError, http.client.HTTPException, OSError) as exc:
            advance(-counted.total)  # the next attempt starts the file again
            local = url.startswith("file:")
            if isinstance(exc, _Refused) or local or attempt == _ATTEMPTS:
                reason = exc.reason if isinstance(exc, HttpError) else exc
                fix = (
                    f"or set {REPOSITORY_ENV} to a Maven mirror"
                    if repository == DEFAULT_REPOSITORY
                    else f"and the repository ({REPOSITORY_ENV} or --repository)"
                )
                raise SetupError(
                    f"cannot fetch {jar.coordinates} from {url}: {reason}: check the network "
                    f"(a proxy goes in HTTPS_PROXY) {fix}"
                ) from exc
            time.sleep(attempt)


class _Refused(Exception):
    """The repository answered with an error status: asking again would not help."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")


@contextmanager
def _body(url: str) -> Iterator[tuple[Iterator[bytes], int | None]]:
    """The bytes at ``url`` (a file:// path, or fetched), and the length it declares."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise OSError(f"a file:// URL names another host ({parts.netloc})")
        with open(urllib.parse.unquote(parts.path), "rb") as f:
            yield iter(lambda: f.read(_CHUNK), b""), None
        return
    # Redirects followed, the system's roots trusted: as Python's own urllib does.
    headers = {"User-Agent": "kiq-setup", "Accept-Encoding": "identity"}
    with stream(url, timeout_s=60, headers=headers, verify=system_roots()) as response:
        if not response.is_success:
            raise _Refused(response.status_code)
        declared = str(response.headers.get("Content-Length", ""))
        yield response.iter_raw(_CHUNK), int(declared) if declared.isdigit() else None


class _Counted:
    """``advance``, counting what it was given."""

    def __init__(self, advance: Callable[[int], None]) -> None:
        self.advance = advance
        self.total = 0

    def __call__(self, n: int) -> None:
        self.total += n
        self.advance(n)


def _download_once(jar: Jar, url: str, dest: Path, advance: Callable[[int], None]) -> None:
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    temp = Path(name)
    try:
        digest, got = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, _body(url) as (chunks, declared):
            for chunk in chunks:
                got += len(chunk)
                if got > jar.size:
                    break
                digest.update(chunk)
                out.write(chunk)
                advance(len(chunk))
            if declared is not None and got < declared:  # the connection dropped: again
                raise http.client.IncompleteRead(b"", declared - got)
            out.flush()
            os.fsync(out.fileno())
        if got != jar.size or digest.hexdigest() != jar.sha256:
            what = f"SHA-256 {digest.hexdigest()}" if got == jar.size else f"{got} bytes"
            what += " or more" if got > jar.size else ""
            raise SetupError(
                f"{url} is not the pinned {jar.coordinates}: expected {jar.size} bytes with "
                f"SHA-256 {jar.sha256}, got {what}; nothing was written. If {REPOSITORY_ENV} "
                "names a mirror, it serves another file: fix the mirror or unset it"
            )
        os.replace(temp, dest)
    finally:
        temp.unlink(missing_ok=True)

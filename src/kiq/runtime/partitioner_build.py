"""Building kiq's Kafka partitioner from the Java source the package ships.

One class (``io.kiq.kafka.KeyPrefixPartitioner``, in ``jvm/partitioner/`` beside this
module), compiled with ``javac --release 17`` against the kafka-clients jar of the spark set
(the API Spark's Kafka connector ships), and zipped into ``kiq-partitioner.jar``. The jar's
manifest records the SHA-256 of the source it was built from, so a jar built from another
version of kiq is rebuilt. Only composite keys need it: without a JDK, kiq goes on without.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from kiq.errors import SetupError

JAR_NAME = "kiq-partitioner.jar"
SOURCE = "jvm/partitioner"  # under the kiq.runtime package
DIGEST_ATTRIBUTE = "Kiq-Source-SHA256"
JAVA_RELEASE = "17"
NO_JAVAC = (
    "no `javac` (a JDK 17+) on PATH or in $JAVA_HOME, so kiq's composite-key partitioner is "
    "not built; only pipelines that write composite keys (sep=...) need it: install a JDK "
    "(Debian: openjdk-17-jdk-headless) and run `kiq setup` again"
)


def find_javac() -> Path | None:
    """$JAVA_HOME/bin/javac, else the one on PATH, else None."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return Path(home) / "bin" / "javac"
    found = shutil.which("javac")
    return Path(found) if found else None


def _sources(root: Path) -> list[Path]:
    return sorted(root.rglob("*.java"))


def source_digest() -> str:
    """The SHA-256 of the shipped Java source (names and contents)."""
    with resources.as_file(resources.files("kiq.runtime").joinpath(SOURCE)) as root:
        digest = hashlib.sha256()
        for path in _sources(root):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()


def built_digest(jar: Path) -> str | None:
    """The source digest ``jar`` was built from; None when it is missing or not one of ours."""
    try:
        with zipfile.ZipFile(jar) as z:
            manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == DIGEST_ATTRIBUTE:
            return value.strip()
    return None


def is_current(jar: Path) -> bool:
    """Whether ``jar`` was built from the source this kiq ships."""
    return built_digest(jar) == source_digest()


def build(jar: Path, kafka_clients: Path, javac: Path) -> None:
    """Compile the shipped source against ``kafka_clients`` into ``jar`` (written atomically)."""
    jar.parent.mkdir(parents=True, exist_ok=True)
    with (
        resources.as_file(resources.files("kiq.runtime").joinpath(SOURCE)) as root,
        tempfile.TemporaryDirectory(prefix="kiq-partitioner-") as work,
    ):
        classes = Path(work) / "classes"
        argv = [str(javac), "--release", JAVA_RELEASE, "-encoding", "UTF-8", "-nowarn"]
        argv += ["-cp", str(kafka_clients), "-d", str(classes), *map(str, _sources(root))]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SetupError(f"cannot run {javac}: {exc}: install a JDK 17+") from exc
        if out.returncode != 0:
            raise SetupError(
                f"javac could not compile kiq's partitioner ({javac}, needs a JDK 17+):\n"
                + (out.stderr or out.stdout).strip()
            )
        manifest = (
            f"Manifest-Version: 1.0\r\nCreated-By: kiq setup\r\n"
            f"{DIGEST_ATTRIBUTE}: {source_digest()}\r\n\r\n"
        )
        temp = jar.with_name(f".{jar.name}.part")
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", manifest)
            for path in sorted(classes.rglob("*.class")):
                z.write(path, path.relative_to(classes).as_posix())
        os.replace(temp, jar)

"""The jar fetcher and the one door that fetches on demand: no network, a repository on disk
(file://) or on a loopback HTTP server."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kiq.cli.main import app
from kiq.errors import SetupError
from kiq.runtime import jar_fetch, jars, partitioner_build
from kiq.runtime.jar_fetch import Jar, JarSet, check_set, fetch_set, repository_url

ROOT = Path(__file__).parents[2]


def _jar(name: str, body: bytes) -> Jar:
    return Jar("org.example", name, "1.0", len(body), hashlib.sha256(body).hexdigest())


class Repo:
    """A Maven repository laid out on disk, with the sets it serves."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri() + "/"
        bodies = {
            n: os.urandom(5000 + i)
            for i, n in enumerate(("a", "b", "kafka_2.13", "spark-sql-kafka-0-10_2.13"))
        }
        self.bodies = {_jar(n, b): b for n, b in bodies.items()}
        jar = {j.artifact: j for j in self.bodies}
        self.sets = {
            "kafka": JarSet("kafka", "the test broker", (jar["a"], jar["kafka_2.13"])),
            "spark": JarSet(
                "spark", "the test connector", (jar["b"], jar["spark-sql-kafka-0-10_2.13"])
            ),
        }
        for j, body in self.bodies.items():
            self.put(j, body)

    def path(self, jar: Jar) -> Path:
        return self.root / jar.url("").lstrip("/")

    def put(self, jar: Jar, body: bytes) -> None:
        self.path(jar).parent.mkdir(parents=True, exist_ok=True)
        self.path(jar).write_bytes(body)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "repo")


def _console() -> Console:
    return Console(file=io.StringIO(), width=200)


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


def test_a_set_is_fetched_verified_and_named_only_when_whole(repo: Repo, tmp_path: Path):
    dest = tmp_path / "jars" / "kafka"
    out = io.StringIO()
    before = fetch_set(dest, repo.sets["kafka"], repo.url, Console(file=out, width=200))
    assert len(before.missing) == 2
    assert sorted(p.name for p in dest.iterdir()) == ["a-1.0.jar", "kafka_2.13-1.0.jar"]
    assert check_set(dest, repo.sets["kafka"]).complete
    assert f"into {dest}" in out.getvalue() and "org.example:a:1.0" in out.getvalue()


def test_present_jars_are_kept_and_not_fetched(repo: Repo, tmp_path: Path):
    dest = tmp_path / "kafka"
    fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    for j in repo.bodies:  # the repository is gone: nothing may be fetched
        repo.path(j).unlink()
    mtimes = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    before = fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    assert before.complete
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == mtimes


def test_a_file_with_another_checksum_is_refused_and_nothing_is_written(repo: Repo, tmp_path: Path):
    a = next(j for j in repo.bodies if j.artifact == "a")
    repo.put(a, os.urandom(a.size))  # same size, other bytes: a tampered mirror
    dest = tmp_path / "kafka"
    with pytest.raises(SetupError, match=r"not the pinned org\.example:a:1\.0.*SHA-256"):
        fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    assert not (dest / a.file_name).exists()
    assert _leftovers(dest) == []


def test_a_wrong_jar_in_place_is_replaced_and_a_failed_fetch_leaves_it_alone(
    repo: Repo, tmp_path: Path
):
    dest = tmp_path / "kafka"
    fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    a = next(j for j in repo.bodies if j.artifact == "a")
    (dest / a.file_name).write_bytes(b"junk")
    assert check_set(dest, repo.sets["kafka"]).wrong == (a,)
    repo.put(a, b"x" * (a.size + 10))  # too long: refused before the rename
    with pytest.raises(SetupError, match="or more"):
        fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    assert (dest / a.file_name).read_bytes() == b"junk"
    assert _leftovers(dest) == []
    repo.put(a, repo.bodies[a])
    fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    assert (dest / a.file_name).read_bytes() == repo.bodies[a]


def test_jars_the_set_does_not_list_are_removed(repo: Repo, tmp_path: Path):
    dest = tmp_path / "kafka"
    dest.mkdir()
    (dest / "kafka_2.13-0.9.jar").write_bytes(b"old")
    (dest / "notes.txt").write_text("kept")
    assert check_set(dest, repo.sets["kafka"]).stale == (dest / "kafka_2.13-0.9.jar",)
    fetch_set(dest, repo.sets["kafka"], repo.url, _console())
    assert not (dest / "kafka_2.13-0.9.jar").exists() and (dest / "notes.txt").exists()


class _Truncating(http.server.BaseHTTPRequestHandler):
    """Serves ``/missing/...`` as 404 and anything else as half a body, then hangs up."""

    def do_GET(self) -> None:
        if self.path.startswith("/missing/"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", "10000")
        self.end_headers()
        self.wfile.write(b"x" * 5000)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Truncating)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_http_errors_say_what_failed_and_leave_no_partial_file(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(jar_fetch.time, "sleep", lambda s: None)
    jar = _jar("a", b"y" * 10000)
    jar_set = JarSet("kafka", "test", (jar,))
    with pytest.raises(SetupError, match=r"HTTP 404.*KIQ_MAVEN_REPOSITORY"):
        fetch_set(tmp_path, jar_set, f"{server}/missing/", _console())
    with pytest.raises(SetupError, match=r"cannot fetch org\.example:a:1\.0 from http://127"):
        fetch_set(tmp_path, jar_set, f"{server}/cut/", _console())
    assert list(tmp_path.iterdir()) == []


def test_the_repository_comes_from_the_flag_the_environment_or_central(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("KIQ_MAVEN_REPOSITORY", raising=False)
    assert repository_url() == "https://repo1.maven.org/maven2/"
    monkeypatch.setenv("KIQ_MAVEN_REPOSITORY", "https://mirror.example/maven")
    assert repository_url() == "https://mirror.example/maven/"
    assert repository_url("file:///srv/m2") == "file:///srv/m2/"
    with pytest.raises(SetupError, match="--repository or KIQ_MAVEN_REPOSITORY"):
        repository_url("ftp://old.example/")


def _pom_property(pom: str, name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</", (ROOT / pom).read_text())
    assert match, f"{pom} has no {name}"
    return match.group(1)


def test_the_shipped_manifest_pins_what_the_poms_name():
    """The poms are the source of versions; scripts/lock_jars.py must be run after a change."""
    manifest = jar_fetch.load_manifest()
    assert len(manifest["kafka"].jars) == 46 and len(manifest["spark"].jars) == 4
    coords = {s: {j.coordinates for j in manifest[s].jars} for s in manifest}
    kafka = _pom_property("jvm/kafka-broker/pom.xml", "kafka.version")
    log4j = _pom_property("jvm/kafka-broker/pom.xml", "log4j.version")
    assert f"org.apache.kafka:kafka_2.13:{kafka}" in coords["kafka"]
    assert f"org.apache.logging.log4j:log4j-slf4j-impl:{log4j}" in coords["kafka"]
    spark = _pom_property("jvm/spark-connector/pom.xml", "spark.version")
    assert spark == jars.SPARK_CONNECTOR_VERSION
    assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark}" in coords["spark"]
    clients = _pom_property("jvm/kiq-partitioner/pom.xml", "kafka-clients.version")
    assert f"org.apache.kafka:kafka-clients:{clients}" in coords["spark"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", j.sha256) for s in manifest.values() for j in s.jars)


def test_the_partitioner_source_ships_in_the_package_and_jars_record_it(tmp_path: Path):
    digest = partitioner_build.source_digest()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    jar = tmp_path / "kiq-partitioner.jar"
    assert partitioner_build.built_digest(jar) is None
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr(
            "META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\r\nKiq-Source-SHA256: {digest}\r\n"
        )
    assert partitioner_build.is_current(jar)
    assert not (ROOT / "jvm" / "kiq-partitioner" / "src").exists(), "one copy of the source"


# -- the door: fetching on demand into the per-user cache only ------------------------------


@pytest.fixture
def fake_manifest(repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    """The test repository as the manifest, XDG_CACHE_HOME in tmp_path, no javac."""
    monkeypatch.setattr(jar_fetch, "load_manifest", lambda: repo.sets)
    monkeypatch.setattr(partitioner_build, "find_javac", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KIQ_MAVEN_REPOSITORY", repo.url)
    jars._ensure_once.cache_clear()
    yield repo
    jars._ensure_once.cache_clear()


def test_the_per_user_cache_is_filled_on_demand(fake_manifest: Repo, tmp_path: Path):
    cache = tmp_path / "xdg" / "kiq" / "jars"
    assert jars.kafka_broker_classpath(cache) == f"{cache / 'kafka'}/*"
    assert sorted(p.name for p in jars.spark_connector_jars(cache, "1.0")) == [
        "b-1.0.jar",
        "spark-sql-kafka-0-10_2.13-1.0.jar",
    ]
    assert jars.partitioner_jar(cache) is None  # no javac: composite keys will say so


def test_other_jar_dirs_are_never_filled_behind_the_users_back(fake_manifest: Repo, tmp_path: Path):
    with pytest.raises(SetupError, match=r"kiq setup --jars-dir .*KIQ_BROKER_JARS_DIR"):
        jars.kafka_broker_classpath(tmp_path / "mine")
    assert not (tmp_path / "mine").exists()
    checkout = tmp_path / "kiq"
    (checkout / "jvm" / "kafka-broker").mkdir(parents=True)
    (checkout / "jvm" / "kafka-broker" / "pom.xml").touch()
    with pytest.raises(SetupError, match=r"make jars"):
        jars.kafka_broker_classpath(checkout / ".cache" / "jars")


def test_kiq_setup_fills_a_jars_dir_and_check_reports_it(fake_manifest: Repo, tmp_path: Path):
    runner = CliRunner()
    target = tmp_path / "j"
    result = runner.invoke(app, ["setup", "--check", "--jars-dir", str(target)])
    assert result.exit_code == 1
    assert "2 of 2 missing" in result.output
    result = runner.invoke(app, ["setup", "--jars-dir", str(target)])
    assert result.exit_code == 0, result.output
    assert "no `javac`" in result.output and "only composite keys need" in result.output
    assert f"in {target / 'kafka'}: 2 jars, verified (2 fetched)" in result.output
    result = runner.invoke(app, ["setup", "--check", "--jars-dir", str(target)])
    assert result.exit_code == 1  # the partitioner is not built
    assert "in " + str(target / "spark") + ": 2 jars, verified" in result.output

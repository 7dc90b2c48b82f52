"""kiq as a user gets it: the wheel built, installed in a virtual environment of its own,
and run outside the checkout, where its jars come from the per-user cache.

The wheel is built from a copy of what it is made of (pyproject.toml, README.md, src/), so
nothing is written into the checkout. The environment takes the wheel alone (``--no-deps``)
and sees kiq's dependencies in the project's environment through a path file, which keeps
the test from downloading pyspark; its own site-packages come first, so ``kiq`` is the
wheel's. The per-user cache is seeded from the checkout's ``.cache/jars`` rather than
downloaded again: `kiq setup` must find every jar in it and verify it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from kiq.runtime.ports import free_ports
from tests.integration.test_new_app import first_key, kiq_up
from tests.integration.test_up import ours

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CHECKOUT_JARS = ROOT / ".cache" / "jars"


def _run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)])
    (built,) = out.glob("kiq-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding the wheel; its ``bin`` directory."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    # The project's dependencies, after the environment's own packages (the wheel's kiq).
    (site / "project-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ]
    )
    return venv / "bin"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A directory outside the checkout, with a per-user cache seeded from the checkout's."""
    assert ROOT not in tmp_path.parents
    if not (CHECKOUT_JARS / "kafka").is_dir():
        pytest.skip("the checkout's .cache/jars is empty: run `make jars`")
    shutil.copytree(
        CHECKOUT_JARS, tmp_path / "xdg" / "kiq" / "jars", ignore=shutil.ignore_patterns(".*")
    )
    return tmp_path


def _env(home: Path) -> dict[str, str]:
    """This run's environment (its process mark included), without kiq settings or paths."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("KIQ_") and k != "KIQ_PROCESS_MARKS") and k != "PYTHONPATH"
    }
    return {**env, "XDG_CACHE_HOME": str(home / "xdg")}


def test_the_wheel_ships_the_jar_manifest_and_the_partitioner_source(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert "kiq/runtime/jvm/jars.lock.json" in names
    assert "kiq/runtime/jvm/partitioner/io/kiq/kafka/KeyPrefixPartitioner.java" in names


def test_an_installed_kiq_sets_up_and_runs_a_broker_outside_the_checkout(
    installed: Path, home: Path
):
    kiq, env = str(installed / "kiq"), _env(home)
    where = _run([str(installed / "python"), "-c", "import kiq; print(kiq.__file__)"], env=env)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), "not the wheel's kiq"

    setup = _run([kiq, "setup"], cwd=home, env=env)
    cache = home / "xdg" / "kiq" / "jars"
    assert f"kiq's JVM jars in {cache}" in setup.stdout
    assert f"in {cache / 'kafka'}: 46 jars, verified" in setup.stdout
    assert f"in {cache / 'spark'}: 4 jars, verified" in setup.stdout
    assert f"in {cache / 'kiq'}: kiq-partitioner.jar, current" in setup.stdout
    assert "fetching" not in setup.stdout + setup.stderr, "the seeded cache was not enough"
    assert "all in place" in setup.stdout
    check = _run([kiq, "setup", "--check"], cwd=home, env=env)
    assert "all in place" in check.stdout

    port, controller = free_ports(2)
    flags = ["--port", str(port)]
    started = time.monotonic()
    try:
        start = _run(
            [kiq, "broker", "start", *flags, "--controller-port", str(controller)],
            cwd=home,
            env=env,
        )
        assert "broker running pid=" in start.stdout and f"127.0.0.1:{port}" in start.stdout
        status = _run([kiq, "broker", "status", *flags], cwd=home, env=env)
        assert "running" in status.stdout
        assert (home / ".kiq" / "broker" / "logs" / "server.log").is_file()
    finally:
        stop = subprocess.run(
            [kiq, "broker", "stop", *flags],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "stopped" in stop.stdout
    gone = subprocess.run(
        [kiq, "broker", "status", *flags], cwd=home, env=env, capture_output=True, text=True
    )
    assert gone.returncode != 0 and "stopped" in gone.stdout
    assert time.monotonic() - started < 120


def test_an_installed_kiq_writes_tests_and_runs_a_new_app_outside_the_checkout(
    installed: Path, home: Path
):
    """The README's first steps with the wheel alone: `kiq new`, its test, `kiq up`."""
    kiq, env = str(installed / "kiq"), _env(home)
    _run([kiq, "new", "shop"], cwd=home, env=env)
    tested = _run(
        [str(installed / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "shop"],
        cwd=home,
        env=env,
    )
    assert "3 passed" in tested.stdout

    broker_port, controller_port, port = free_ports(3)
    env |= {
        "KIQ_BROKER_PORT": str(broker_port),
        "KIQ_BROKER_CONTROLLER_PORT": str(controller_port),
    }
    with kiq_up(
        [kiq, "up", "-c", "shop/kiq.toml", "--nodes", "1", "--port", str(port)], home, env, "shop"
    ):
        country, start, _ = first_key(f"http://127.0.0.1:{port}", "country-days").split("|")
        day = start[:10]
        got = httpx.get(f"http://127.0.0.1:{port}/v1/countries/{country}/days/{day}")
        assert got.status_code == 200 and got.json()["views"] >= 1, got.text
    time.sleep(0.5)
    assert ours(home) == []

"""`kiq broker start|stop|status` as a user runs it, against a broker of its own."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kiq.runtime.ports import free_ports


def kiq(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "kiq", *args], capture_output=True, text=True, timeout=180, env=env
    )


def _gone(pid: int) -> bool:
    """The process is gone or a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def broker_flags(tmp_path: Path) -> list[str]:
    port, cport = free_ports(2)
    return [
        "--port",
        str(port),
        "--controller-port",
        str(cport),
        "--data-dir",
        str(tmp_path / "data"),
        "--log-dir",
        str(tmp_path / "logs"),
    ]


def test_start_status_stop_are_idempotent(broker_flags: list[str], tmp_path: Path):
    try:
        first = kiq("broker", "start", *broker_flags)
        assert first.returncode == 0, first.stderr
        assert "running" in first.stdout
        assert (tmp_path / "logs" / "server.log").stat().st_size > 0  # logs go to a file

        again = kiq("broker", "start", *broker_flags)
        assert again.returncode == 0, again.stderr
        assert "storage formatted" not in again.stderr
        pid = (tmp_path / "data" / "broker.pid").read_text().strip()
        assert f"pid={pid}" in first.stdout.replace("\n", "") and f"pid={pid}" in again.stdout

        status = kiq("broker", "status", *broker_flags)
        assert status.returncode == 0 and "running" in status.stdout
    finally:
        stopped = kiq("broker", "stop", *broker_flags)
    assert stopped.returncode == 0 and "broker stopped" in stopped.stdout
    assert _gone(int(pid))

    again = kiq("broker", "stop", *broker_flags)
    assert again.returncode == 0 and "not running" in again.stdout
    status = kiq("broker", "status", *broker_flags)
    assert status.returncode == 1 and "stopped" in status.stdout


def test_restart_keeps_data(broker_flags: list[str]):
    from kiq.kafka import create_topics, topic_partitions

    bootstrap = f"127.0.0.1:{broker_flags[1]}"
    try:
        assert kiq("broker", "start", *broker_flags).returncode == 0
        create_topics(bootstrap, {"kept": 3})
        assert kiq("broker", "stop", *broker_flags).returncode == 0
        assert kiq("broker", "start", *broker_flags).returncode == 0
        assert topic_partitions(bootstrap, "kept") == 3
    finally:
        kiq("broker", "stop", *broker_flags)


def test_taken_port_is_a_clear_error(broker_flags: list[str]):
    port = int(broker_flags[1])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = kiq("broker", "start", *broker_flags)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is taken" in result.stderr
    assert "--port" in result.stderr


def test_missing_jars_name_the_make_target(broker_flags: list[str], tmp_path: Path):
    result = kiq(
        "broker",
        "start",
        *broker_flags,
        env_extra={"KIQ_BROKER_JARS_DIR": str(tmp_path / "nowhere")},
    )
    assert result.returncode == 1
    assert "make jars" in result.stderr

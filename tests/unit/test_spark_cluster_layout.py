"""`kiq spark stop|status` find what `start` laid out from the data directory alone.

The master is recognised by its port, so a stop told nothing (or the wrong port) once
left it running and deleted its pid file, and kiq could never stop it again. Stand-ins
for ``spark-class`` play the daemons: the master serves the web UI's ``/json/`` with one
live worker, the worker sleeps; both carry the arguments kiq recognises them by.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kiq.cli.main import app
from kiq.runtime import processes, spark_cluster
from kiq.runtime.ports import free_ports
from kiq.runtime.spark_cluster import started_layout

_SPARK_CLASS = """\
#!{python}
import http.server, json, sys, time

main, args = sys.argv[1], sys.argv[2:]
if main.endswith(".Master"):
    ui = int(args[args.index("--webui-port") + 1])

    class Ui(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({{"workers": [{{"state": "ALIVE", "cores": 2}}]}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", ui), Ui).serve_forever()
while True:
    time.sleep(1)
"""


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data directory for `kiq spark`, whose daemons are stand-ins; none outlives the test."""
    home = tmp_path / "pyspark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text(_SPARK_CLASS.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setattr(spark_cluster, "spark_home", lambda: home)
    monkeypatch.setattr(spark_cluster, "java_executable", lambda: Path(sys.executable))
    root = tmp_path / "spark"
    yield root
    for role in ("master", "worker"):
        pid = processes.read_pid(root / f"{role}.pid")
        if pid is not None and processes.runs_with(pid, str(script)):
            os.kill(pid, signal.SIGKILL)


def _kiq(*args: str) -> Result:
    return CliRunner().invoke(app, ["spark", *args])


def _says(out: Result, text: str) -> bool:
    """Whether the output holds ``text``, however the terminal wrapped it."""
    return "".join(text.split()) in "".join(out.output.split())


def _start(data_dir: Path) -> tuple[int, int, int]:
    """Start on free ports; the master's and worker's pids and the master's port."""
    port, ui_port = free_ports(2)
    out = _kiq("start", "--port", str(port), "--ui-port", str(ui_port), "--data-dir", str(data_dir))
    assert out.exit_code == 0, out.output
    master = processes.read_pid(data_dir / "master.pid")
    worker = processes.read_pid(data_dir / "worker.pid")
    assert master is not None and worker is not None
    return master, worker, port


def test_stop_without_the_port_stops_what_start_started(data_dir: Path):
    master, worker, port = _start(data_dir)
    assert started_layout(data_dir)["port"] == port

    out = _kiq("stop", "--data-dir", str(data_dir))

    assert out.exit_code == 0 and "spark stopped" in out.output, out.output
    assert not processes.alive(master) and not processes.alive(worker)
    assert not (data_dir / "master.pid").exists() and not (data_dir / "worker.pid").exists()


def test_status_reports_from_the_data_dir_alone(data_dir: Path):
    master, worker, port = _start(data_dir)

    out = _kiq("status", "--data-dir", str(data_dir))

    assert out.exit_code == 0, out.output
    assert f"running master=spark://127.0.0.1:{port}" in out.output
    assert f"pids={master},{worker}" in out.output


def test_a_pid_file_of_a_master_that_was_not_stopped_is_kept(data_dir: Path):
    master, worker, _ = _start(data_dir)
    (other,) = free_ports(1)

    out = _kiq("stop", "--port", str(other), "--data-dir", str(data_dir))

    assert out.exit_code == 1
    assert _says(out, "without --port") and _says(out, "left it and its pid file alone")
    assert processes.alive(master) and processes.read_pid(data_dir / "master.pid") == master
    assert not processes.alive(worker)  # the worker is this data dir's: stopped
    # and kiq can still stop it
    assert _kiq("stop", "--data-dir", str(data_dir)).exit_code == 0
    assert not processes.alive(master) and not (data_dir / "master.pid").exists()


def test_start_on_another_port_keeps_the_running_masters_pid_file(data_dir: Path):
    master, _, port = _start(data_dir)
    other, other_ui = free_ports(2)

    out = _kiq(
        "start", "--port", str(other), "--ui-port", str(other_ui), "--data-dir", str(data_dir)
    )

    assert out.exit_code == 1 and _says(out, f"kiq spark stop --data-dir {data_dir}")
    assert processes.read_pid(data_dir / "master.pid") == master
    assert started_layout(data_dir)["port"] == port


def test_a_record_kiq_cannot_read_is_no_record(tmp_path: Path):
    assert started_layout(tmp_path) == {}
    (tmp_path / "cluster.json").write_text("[1, 2]")
    assert started_layout(tmp_path) == {}
    (tmp_path / "cluster.json").write_text('{"port": "7077", "host": "h", "other": 1}')
    assert started_layout(tmp_path) == {"host": "h"}

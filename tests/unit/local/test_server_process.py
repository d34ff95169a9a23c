"""ServerProcess without a server: its command line, and stopping a process known only by pid."""

from __future__ import annotations

import subprocess
import sys

from fluss_spark.local.server_process import ServerProcess


def _server(tmp_path, **kw) -> ServerProcess:
    return ServerProcess("tablet", "zk:2181/c", server_id=3, data_dir=tmp_path / "tablet-3",
                         remote_data_dir=tmp_path / "remote", ready_file=tmp_path / "t.ready",
                         log_path=tmp_path / "t.log", **kw)


def test_command_line_names_every_setting(tmp_path):
    s = _server(tmp_path, port=5001, options=["kv.scanner.ttl=2s"],
                disabled_apis=["kv_snapshot_lease"])
    cmd = s.command()
    assert cmd[:5] == [sys.executable, "-m", "fluss_spark.server", "tablet", "--id"]
    pairs = dict(zip(cmd[4::2], cmd[5::2]))
    assert pairs == {"--id": "3", "--zookeeper": "zk:2181/c", "--host": "127.0.0.1",
                     "--port": "5001", "--data-dir": str(tmp_path / "tablet-3"),
                     "--remote-data-dir": str(tmp_path / "remote"),
                     "--ready-file": str(tmp_path / "t.ready"),
                     "--log-file": str(tmp_path / "t.log"),
                     "--option": "kv.scanner.ttl=2s", "--disable-api": "kv_snapshot_lease"}


def test_a_process_known_only_by_pid_is_recognised_and_stopped(tmp_path):
    # Stands in for a server started by an earlier program: same data dir on its command line.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             str(tmp_path / "tablet-3")])
    try:
        s = _server(tmp_path)
        assert not s.alive
        s.pid = proc.pid
        assert s.alive
        s.check_running()   # running: no error
        s.stop(timeout_s=5)
        assert proc.wait(5) is not None and not s.alive
    finally:
        proc.kill()
        proc.wait()

"""EmbeddedProcesses bookkeeping without starting servers: state file, process identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fluss_spark.errors import FlussError
from fluss_spark.local.embedded import EmbeddedProcesses, _pid_alive, read_state


def test_state_file_round_trip_keeps_ports_and_options(tmp_path):
    c = EmbeddedProcesses(tmp_path, tablets=2, zookeeper="zk:2181/chroot",
                          server_options=["kv.scanner.ttl=2s"], disabled_apis=["kv_snapshot_lease"])
    c.servers[("coordinator", 0)].port = 5000
    c.servers[("tablet", 0)].port = 5001
    c.servers[("tablet", 1)].port = 5002
    c._save_state()
    state = read_state(tmp_path)
    assert state["version"] == 1 and state["zookeeper"]["external"] is True
    loaded = EmbeddedProcesses.load(tmp_path)
    assert loaded.bootstrap_servers == "127.0.0.1:5000,127.0.0.1:5001,127.0.0.1:5002"
    assert loaded.zookeeper_address == "zk:2181/chroot"
    assert loaded.server_options == ["kv.scanner.ttl=2s"]
    assert loaded.disabled_apis == ["kv_snapshot_lease"]
    assert [p["alive"] for p in loaded.processes()] == [False, False, False]


def test_a_new_cluster_object_on_an_old_dir_reuses_its_ports(tmp_path):
    c = EmbeddedProcesses(tmp_path, tablets=1, zookeeper="zk:1")
    c.servers[("coordinator", 0)].port = 6000
    c.servers[("tablet", 0)].port = 6001
    c._save_state()
    again = EmbeddedProcesses(tmp_path, tablets=2, zookeeper="zk:1")
    assert again.servers[("tablet", 0)].port == 6001
    assert again.servers[("tablet", 1)].port is None   # a new tablet gets a new port on start


def test_missing_and_foreign_state(tmp_path):
    assert read_state(tmp_path) is None
    with pytest.raises(FlussError, match="cluster start"):
        EmbeddedProcesses.load(tmp_path)
    (tmp_path / "cluster.json").write_text(json.dumps({"version": 2}))
    with pytest.raises(FlussError, match="version 2"):
        read_state(tmp_path)
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(FlussError, match="cannot read"):
        read_state(tmp_path)


def test_unknown_process_is_named(tmp_path):
    with pytest.raises(FlussError, match="no tablet 5"):
        EmbeddedProcesses(tmp_path, tablets=1, zookeeper="zk:1").kill("tablet", 5)
    with pytest.raises(FlussError, match="at least one tablet"):
        EmbeddedProcesses(tmp_path, tablets=0)


def test_pid_identity_uses_the_command_line(tmp_path):
    marker = str(tmp_path / "tablet-1")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        assert _pid_alive(proc.pid, None, marker)
        assert not _pid_alive(proc.pid, None, str(tmp_path / "tablet-"))   # no prefix match
        assert not _pid_alive(proc.pid, None, str(tmp_path / "other"))     # a reused pid
    finally:
        proc.kill()
        proc.wait()
    assert not _pid_alive(proc.pid, None, marker)
    assert not _pid_alive(os.getpid() + 10_000_000, None, None)

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


def test_apache_fluss_sasl_state_and_files(tmp_path):
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses
    old = {"version": 1, "engine": "apache-fluss", "fluss_version": "0.9.1-incubating",
           "host": "127.0.0.1", "heap": "512m", "options": {},
           "zookeeper": {"address": "zk:1", "external": True, "port": None, "pid": None},
           "servers": [{"role": "coordinator", "id": 0, "port": 7000, "pid": None},
                       {"role": "tablet", "id": 0, "port": 7001, "pid": None}]}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "apache-fluss.json").write_text(json.dumps(old))
    loaded = ApacheFlussProcesses.load(tmp_path / "old")     # written before SASL existed
    assert not loaded.sasl and loaded.credentials is None and loaded.client_properties == {}

    c = ApacheFlussProcesses(tmp_path / "new", zookeeper="zk:1", sasl=True)
    c.servers[("coordinator", 0)].port, c.servers[("coordinator", 0)].internal_port = 7100, 7101
    c._save_state()
    jaas = c._write_security()
    again = ApacheFlussProcesses.load(tmp_path / "new")
    assert again.sasl and again.servers[("coordinator", 0)].internal_port == 7101
    user, password = again.credentials
    assert user == "admin" and oct(c.users_file.stat().st_mode & 0o777) == "0o600"
    assert jaas is not None and f'user_admin="{password}";' in jaas.read_text()
    assert again.client_properties["client.security.sasl.password"] == password
    with pytest.raises(FlussError, match="with SASL"):
        ApacheFlussProcesses(tmp_path / "new", zookeeper="zk:1")
    c.users_file.write_text('admin:pa"ss\n')
    with pytest.raises(FlussError, match="cannot be written to JAAS"):
        c._write_security()


def test_start_reports_each_process_as_it_comes_up(tmp_path):
    c = EmbeddedProcesses(tmp_path, tablets=2, zookeeper="zk:1")
    lines: list[str] = []
    c.report = lines.append
    for port, s in enumerate(c.servers.values(), start=7000):
        s.port = port
    slow = c.servers[("tablet", 0)]
    polls = {"n": 0}

    def up(s):
        polls["n"] += 1
        return s is not slow or polls["n"] > 4    # tablet 0 answers on its second poll
    c._wait_for(list(c.servers.values()), up, "start", 0.0)
    assert [ln.split(" (")[0] for ln in lines] == ["coordinator 0 up on 127.0.0.1:7000",
                                                   "tablet 1 up on 127.0.0.1:7002",
                                                   "tablet 0 up on 127.0.0.1:7001"]
    c._ensure_zookeeper()     # an external ZooKeeper is named, not started
    assert lines[-1] == "zookeeper at zk:1 (not started here)"


def test_the_coordinator_port_is_pinned_unless_it_runs_on_another(tmp_path):
    c = EmbeddedProcesses(tmp_path, tablets=1, zookeeper="zk:1")
    c.pin_coordinator_port(None)
    assert c.servers[("coordinator", 0)].port is None     # a free port at start
    c.pin_coordinator_port(7100)
    c.pin_coordinator_port(7200)                           # not running: it may move
    assert c.servers[("coordinator", 0)].port == 7200
    coord = c.servers[("coordinator", 0)]
    coord.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    coord.pid = coord.proc.pid
    try:
        c.pin_coordinator_port(7200)
        with pytest.raises(FlussError, match="runs on port 7200; stop the cluster to move it "
                                             "to port 7300"):
            c.pin_coordinator_port(7300)
    finally:
        coord.proc.kill()
        coord.proc.wait()


def test_a_taken_port_of_a_server_to_start_is_refused_before_anything_starts(tmp_path):
    import socket
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        c = EmbeddedProcesses(tmp_path / "c", tablets=1, zookeeper="zk:1")
        c.servers[("tablet", 0)].port = port      # the port it had, as in its state file
        with pytest.raises(FlussError, match=f"^tablet 0 cannot listen on port {port} of "
                                             "127.0.0.1: another process listens on it; free "
                                             "the port, or start the cluster in another "
                                             "directory$"):
            c.start()
    assert not (tmp_path / "c").exists()

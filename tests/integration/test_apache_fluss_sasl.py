"""SASL PLAIN to a real Apache Fluss cluster whose client listener requires it: pyfluss writes,
this project's client and the command line read, and a missing or wrong login fails at once in
one line."""

from __future__ import annotations

import json
import stat
import time
import uuid
from contextlib import closing

import pytest

from fluss_spark.cli import main
from fluss_spark.client.backends import APACHE_FLUSS, detect_engine, open_cluster
from fluss_spark.errors import AuthenticationFailed
from fluss_spark.testing.apache_fluss import PyFluss


@pytest.fixture(scope="module")
def sasl_fluss(start_apache_fluss):
    local = start_apache_fluss({}, tablets=1, sasl=True)
    yield local
    local.stop()


@pytest.fixture(scope="module")
def log_table(sasl_fluss):
    name = f"sasl.t_{uuid.uuid4().hex[:8]}"
    with PyFluss(sasl_fluss.bootstrap_servers, sasl_fluss.client_properties) as fluss:
        fluss.create_table(name, "id BIGINT, v STRING")
        fluss.append(name, [(1, "a"), (2, "b"), (3, None)])
    return name


def test_the_cluster_is_configured_with_flusss_own_options(sasl_fluss):
    users = sasl_fluss.users_file
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    assert stat.S_IMODE(sasl_fluss.jaas_file.stat().st_mode) == 0o600
    user, password = sasl_fluss.credentials
    assert user == "admin" and f"admin:{password}" in users.read_text()
    conf = (sasl_fluss.base_dir / "coordinator-0" / "conf" / "server.yaml").read_text()
    assert "security.protocol.map: CLIENT:SASL,INTERNAL:PLAINTEXT" in conf
    assert "super.users: User:admin" in conf and password not in conf
    # Nothing the servers logged holds the password.
    assert all(password not in p.read_text(errors="replace")
               for p in (sasl_fluss.base_dir / "logs").glob("*.log"))


def test_our_client_logs_in_and_reads_what_pyfluss_wrote(sasl_fluss, log_table):
    servers = sasl_fluss.bootstrap_servers
    assert detect_engine(servers) == APACHE_FLUSS    # API_VERSIONS needs no login
    user, password = sasl_fluss.credentials
    with closing(open_cluster(servers, username=user, password=password)) as cluster:
        assert cluster.list_offsets(log_table) == {0: 3}
        rows = [(r["id"], r["v"], r["_change_type"], r["_log_offset"])
                for b in cluster.read_log(log_table, 0, 0, 3) for r in b.to_pylist()]
    assert rows == [(1, "a", "+A", 0), (2, "b", "+A", 1), (3, None, "+A", 2)]


def test_a_missing_or_wrong_login_fails_at_once_in_one_line(sasl_fluss, log_table):
    servers = sasl_fluss.bootstrap_servers
    for user, password, says in [
            (None, None, f"{servers} requires a SASL login: set client.security.sasl.username"),
            ("admin", "wrong-pw", f"{servers} refused the SASL PLAIN login of user 'admin'"),
            ("nobody", "wrong-pw", f"{servers} refused the SASL PLAIN login of user 'nobody'")]:
        started = time.monotonic()
        with closing(open_cluster(servers, engine=APACHE_FLUSS, username=user,
                                  password=password, request_timeout_s=30)) as cluster:
            with pytest.raises(AuthenticationFailed) as info:
                cluster.list_offsets(log_table)
        text = str(info.value)
        assert says in text and "\n" not in text and "wrong-pw" not in text, text
        assert time.monotonic() - started < 5, "a refused login is not retried"


def test_the_command_line_logs_in_to_the_local_sasl_cluster_by_itself(
        sasl_fluss, log_table, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("FLUSS_USERNAME", raising=False)
    monkeypatch.delenv("FLUSS_PASSWORD", raising=False)
    argv = ["--bootstrap-servers", sasl_fluss.bootstrap_servers, "table", "list", "--json"]
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(tmp_path))     # not this machine's local cluster
    assert main(argv) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "requires a SASL login" in err, err
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(sasl_fluss.base_dir))
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert {"table": log_table} in json.loads(out), err
    monkeypatch.setenv("FLUSS_USERNAME", "admin")
    monkeypatch.setenv("FLUSS_PASSWORD", "wrong-pw")
    assert main(argv) != 0
    out, err = capsys.readouterr()
    assert "refused the SASL PLAIN login of user 'admin'" in err and "wrong-pw" not in err

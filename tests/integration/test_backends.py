"""bootstrap.servers alone picks the backend: this project's servers or Apache Fluss."""

from __future__ import annotations

import socket
from contextlib import closing

import pytest

from fluss_spark.client import EmbeddedCluster
from fluss_spark.client.apache_fluss.cluster import ApacheFlussWireCluster
from fluss_spark.client.backends import detect_engine, open_cluster
from fluss_spark.errors import AuthenticationFailed, ConfigError, NetworkError
from fluss_spark.local.ports import free_port


def test_each_engine_is_recognised_and_opened(cluster, apache_fluss):
    assert detect_engine(cluster.bootstrap_servers) == "embedded"
    assert detect_engine(apache_fluss.bootstrap_servers) == "apache-fluss"
    with open_cluster(cluster.bootstrap_servers) as ours:
        assert isinstance(ours, EmbeddedCluster)
        caps = ours.capabilities()
        assert (caps.leases, caps.lease_renewal, caps.snapshot_read) == (True, "renew",
                                                                         "scan_session")
    theirs = open_cluster(apache_fluss.bootstrap_servers)
    try:
        assert isinstance(theirs, ApacheFlussWireCluster)
        caps = theirs.capabilities()
        assert (caps.leases, caps.lease_renewal, caps.snapshot_read) == (True, "reacquire",
                                                                         "files")
    finally:
        theirs.close()
    # The probe leaves this project's servers serving their own protocol.
    with open_cluster(cluster.bootstrap_servers, engine="embedded") as again:
        assert isinstance(again.list_tables(), list)


def test_the_first_reachable_server_decides(cluster):
    down = f"127.0.0.1:{free_port()}"
    assert detect_engine(f"{down},{cluster.bootstrap_servers}") == "embedded"


def test_nothing_reachable_and_bad_choices_are_clear_errors(apache_fluss):
    down = f"127.0.0.1:{free_port()}"
    with pytest.raises(NetworkError, match=f"cannot reach any server of {down}"):
        detect_engine(down, timeout_s=0.5)
    with pytest.raises(ConfigError, match="engine must be one of auto, embedded, apache-fluss"):
        open_cluster(down, engine="kafka")
    # A PLAINTEXT listener refuses a login: one line naming the listener and what to check.
    with closing(open_cluster(apache_fluss.bootstrap_servers, engine="apache-fluss",
                              username="u", password="secret-p")) as cluster:
        with pytest.raises(AuthenticationFailed) as info:
            cluster.list_databases()
    text = str(info.value)
    assert f"{apache_fluss.bootstrap_servers} refused the SASL PLAIN login of user 'u'" in text
    assert "PLAINTEXT" in text and "secret-p" not in text and "\n" not in text


def test_a_silent_server_is_not_taken_for_fluss():
    """Something that accepts connections but never answers is not Apache Fluss."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert detect_engine(f"127.0.0.1:{port}", timeout_s=0.5) == "embedded"

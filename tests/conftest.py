"""Shared fixtures: one real ZooKeeper per test session, a fresh chroot per test."""

from __future__ import annotations

import os
import uuid

import pytest

from fluss_spark.testing.zookeeper import ZooKeeperProcess


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A real standalone ZooKeeper process for the whole test session."""
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_address(zookeeper) -> str:
    """``host:port/fluss-tests-<uuid>``: a chroot of its own, so tests never see each other."""
    return f"{zookeeper.address}/fluss-tests-{uuid.uuid4().hex[:12]}"


#: Server options for the shared test cluster: short background intervals keep tests fast.
CLUSTER_TEST_OPTIONS = (
    "kv.snapshot.lease.expiration-check-interval=200ms",
    "kv.scanner.expiration-interval=200ms",
    "log.retention.check-interval=500ms",
)


@pytest.fixture(scope="session")
def cluster(zookeeper, tmp_path_factory):
    """A real LocalCluster (coordinator + 2 tablet servers) on the session ZooKeeper, in a
    chroot of its own, shared by the whole test session."""
    from fluss_spark.testing.cluster import LocalCluster
    local = LocalCluster(tmp_path_factory.mktemp("cluster"), tablets=2,
                         zookeeper=f"{zookeeper.address}/fluss-cluster-{uuid.uuid4().hex[:12]}",
                         server_options=CLUSTER_TEST_OPTIONS)
    local.start()
    yield local
    local.stop()


@pytest.fixture
def conn(cluster):
    """A FlussConnection to the shared test cluster, closed after the test."""
    from fluss_spark.client import FlussConnection
    c = FlussConnection(cluster.bootstrap_servers, request_timeout_s=30.0)
    yield c
    c.close()


@pytest.fixture
def table_name() -> str:
    """A fresh table name ``test.t_<hex>``."""
    return f"test.t_{uuid.uuid4().hex[:12]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the tail of every server log to a failed test that used the cluster."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "cluster" in getattr(item, "fixturenames", ()):
        local = getattr(item, "funcargs", {}).get("cluster")
        # A test module may define its own ``cluster`` fixture of another type.
        if hasattr(local, "log_tails"):
            try:
                report.sections.append(("fluss server logs", local.log_tails(40)))
            except OSError:
                pass


def pytest_report_header(config):
    return f"CI={os.environ.get('CI', '')}"

"""Shared fixtures: one real ZooKeeper per test session, a fresh chroot per test."""

from __future__ import annotations

import os
import uuid

import pytest

from fluss_spark.local.zookeeper import ZooKeeperProcess

# Every JVM the tests start (Spark, Apache Fluss, ZooKeeper) compiles with C1 only: test JVMs
# live for seconds to minutes, and C2's compiler threads cost more CPU than they win back. On
# a 2-core machine, a Spark test module took 25-30% less CPU and ran 10-20% faster (tests/suite.py
# sets the same for the processes it starts outside pytest).
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


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
    "auto-partition.check.interval=500ms",
)


@pytest.fixture(scope="session")
def cluster(zookeeper, tmp_path_factory):
    """A real EmbeddedProcesses (coordinator + 2 tablet servers) on the session ZooKeeper, in a
    chroot of its own, shared by the whole test session."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    local = EmbeddedProcesses(tmp_path_factory.mktemp("cluster"), tablets=2,
                              zookeeper=f"{zookeeper.address}/fluss-cluster-{uuid.uuid4().hex[:12]}",
                              server_options=CLUSTER_TEST_OPTIONS)
    local.start()
    yield local
    local.stop()


#: Principals of the shared SASL cluster (``sasl_cluster``): username -> password.
SASL_USERS = {"admin": "admin-secret", "internal": "internal-secret", "bob": "bob-secret",
              "carol": "carol-secret", "reader": "s3cr3t-pw", "alice": "alice-secret"}
#: Principals of ``sasl_cluster`` allowed READ (and so DESCRIBE) on the whole cluster; the
#: others but ``admin`` have no ACL at first.
SASL_READERS = ("bob", "carol", "reader")


@pytest.fixture(scope="session")
def sasl_cluster(zookeeper, tmp_path_factory):
    """An EmbeddedProcesses (coordinator + 1 tablet) that requires SASL PLAIN, with the principals
    of ``SASL_USERS`` (``admin`` is the super user; ``SASL_READERS`` may read every table),
    shared by the whole test session."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    local = EmbeddedProcesses(tmp_path_factory.mktemp("sasl") / "c", tablets=1, sasl=True,
                              zookeeper=f"{zookeeper.address}/fluss-sasl-{uuid.uuid4().hex[:12]}")
    local.users_file.parent.mkdir(parents=True)
    local.users_file.write_text("".join(f"{u}:{p}\n" for u, p in SASL_USERS.items()))
    local.start()
    from fluss_spark.protocol.acl import AclBinding, OperationType, Resource
    with local.connection() as conn:
        conn.admin().create_acls([AclBinding(Resource.cluster(), f"User:{u}", OperationType.READ)
                                  for u in SASL_READERS])
    yield local
    local.stop()


@pytest.fixture
def local_cluster(tmp_path, request):
    """``local_cluster(**kwargs)``: a started EmbeddedProcesses of this test (embedded ZooKeeper
    unless ``zookeeper=`` is given); stopped afterwards, its logs printed if the test failed."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    made = []
    failed_before = request.session.testsfailed

    def make(**kwargs):
        made.append(EmbeddedProcesses(tmp_path / f"c{len(made)}", **kwargs).start())
        return made[-1]
    yield make
    for local in made:
        if request.session.testsfailed > failed_before:
            for log in sorted((local.base_dir / "logs").glob("*.log")):
                print(f"=== {log.name}\n{log.read_text()[-5000:]}")
        local.stop()


#: Server settings of the shared Apache Fluss cluster: KV snapshots every 5s (the default is 10
#: minutes), and small log segments with a remote-log task every second, so that per-table
#: retention (``table.log.ttl``, ``table.log.tiered.local-segments``) takes effect in a test.
APACHE_FLUSS_TEST_OPTIONS = {
    "kv.snapshot.interval": "5s",
    "log.segment.file-size": "1mb",
    "remote.log.task-interval-duration": "1s",
    # Expired KV snapshot leases are noticed within a second (default: 10 minutes), so a lease
    # that is not renewed loses its snapshots during a test.
    "kv.snapshot.lease.expiration-check-interval": "1s",
    # Auto-partitioning drops partitions past their table's retention at this pace (default:
    # 10 minutes), so an expiry can happen while a test's query reads.
    "auto-partition.check.interval": "3s",
}


def _start_apache_fluss(zookeeper, base_dir, options: dict[str, str] | None = None, *,
                        tablets: int = 2, sasl: bool = False, remote_storage: str | None = None):
    """A started Apache Fluss cluster (1 coordinator + ``tablets`` tablet servers; ``sasl``:
    clients log in with SASL PLAIN) on ``zookeeper`` under a root of its own, with
    ``APACHE_FLUSS_TEST_OPTIONS`` updated by ``options``. Skips when Java
    is missing, except under CI (``CI=true``), where it fails (the jars are fetched when
    missing)."""
    import shutil
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses
    if not shutil.which("java"):
        why = "Apache Fluss needs java (./dev.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    local = ApacheFlussProcesses(
        base_dir, tablets=tablets, zookeeper=zookeeper.address, sasl=sasl,
        remote_storage=remote_storage, options={**APACHE_FLUSS_TEST_OPTIONS, **(options or {}),
                 "zookeeper.path.root": f"/apache-fluss-{uuid.uuid4().hex[:12]}"})
    try:
        local.start()
    except BaseException:
        local.stop()
        raise
    return local


@pytest.fixture(scope="session")
def apache_fluss(zookeeper, tmp_path_factory):
    """A real Apache Fluss cluster (jars from Maven Central: 1 coordinator + 2 tablet servers,
    ``APACHE_FLUSS_TEST_OPTIONS``), shared by the whole test session; no test kills its
    servers (see ``apache_fluss_for_faults``). ``apache_fluss.bootstrap_servers`` is the
    coordinator's address."""
    local = _start_apache_fluss(zookeeper, tmp_path_factory.mktemp("apache-fluss"))
    yield local
    local.stop()


@pytest.fixture
def apache_fluss_for_faults(zookeeper, tmp_path_factory):
    """An Apache Fluss cluster of the test's own, for a test that kills its servers. After a
    tablet server was killed -9 and restarted, Fluss 0.9.1 was seen to keep the one-replica
    buckets it had led offline in the coordinator's view (leader -1 in ZooKeeper), and writes
    of the official client to tables created later to go unacknowledged: such a cluster must
    not serve the tests that follow."""
    local = _start_apache_fluss(zookeeper, tmp_path_factory.mktemp("apache-fluss-faults"))
    yield local
    local.stop()


@pytest.fixture(scope="session")
def start_apache_fluss(zookeeper, tmp_path_factory):
    """``start_apache_fluss(options, tablets=2, sasl=False, remote_storage=None)``: a new Apache
    Fluss cluster with ``APACHE_FLUSS_TEST_OPTIONS`` updated by ``options`` (server settings,
    such as ``kv.snapshot.num-retained``), for a module that needs other settings; the caller
    stops it (one left running stops with the session)."""
    started = []

    def start(options: dict[str, str], **kwargs):
        started.append(_start_apache_fluss(zookeeper, tmp_path_factory.mktemp("apache-fluss"),
                                           options, **kwargs))
        return started[-1]
    yield start
    for local in started:
        local.stop()


@pytest.fixture
def conn(cluster):
    """A FlussConnection to the shared test cluster, closed after the test."""
    from fluss_spark.client import FlussConnection
    c = FlussConnection(cluster.bootstrap_servers, request_timeout_s=30.0)
    yield c
    c.close()


@pytest.fixture
def cli(cluster, capsys):
    """Run the CLI in process against the shared test cluster: returns (exit code, stdout,
    stderr)."""
    from fluss_spark.cli import main

    def run(*argv):
        code = main(["--bootstrap-servers", cluster.bootstrap_servers, *argv])
        out, err = capsys.readouterr()
        return code, out, err
    return run


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

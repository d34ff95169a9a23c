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


def pytest_report_header(config):
    return f"CI={os.environ.get('CI', '')}"

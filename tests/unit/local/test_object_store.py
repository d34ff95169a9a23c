"""ObjectStore's files: its state, its credentials (mode 600, never in status), its build."""

from __future__ import annotations

import stat

import pytest

from fluss_spark.errors import FlussError
from fluss_spark.local import object_store
from fluss_spark.local.object_store import ObjectStore, read_state


def test_credentials_are_made_once_private_and_kept_out_of_the_status(tmp_path):
    store = ObjectStore(tmp_path / "store")
    key, secret = store.credentials
    assert store.credentials == (key, secret)     # made once
    assert stat.S_IMODE(store.credentials_file.stat().st_mode) == 0o600
    assert secret not in str(store.describe())
    with pytest.raises(FlussError, match="never started"):
        store.env()
    store.ports["s3"] = 8333
    assert store.fluss_options()["s3.secret-key"] == secret
    assert store.env() == {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": key,
                           "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1"}
    assert store.uri("remote") == "s3://fluss/remote"
    assert not store.alive and read_state(tmp_path / "store") is None


def test_a_machine_without_go_gets_one_line_saying_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUSS_SPARK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(object_store.shutil, "which", lambda name: None)
    with pytest.raises(FlussError, match="install Go 1.26 or newer"):
        object_store.weed_binary(out=None)


def test_stop_never_signals_a_process_that_is_not_the_store(tmp_path):
    """A pid left in the state file that another process took since is left alone."""
    import subprocess
    import sys
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store = ObjectStore(tmp_path / "store")
        store.pid = other.pid
        assert not store.alive
        store.stop(timeout_s=1)
        assert other.poll() is None and store.pid is None
    finally:
        other.kill()
        other.wait()

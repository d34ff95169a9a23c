"""RemoteStorage: the S3 settings a client reads remote.data.dir with, checked at once."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from fluss_spark.client.remote_storage import RemoteStorage, filesystem
from fluss_spark.connector.options import parse_options
from fluss_spark.errors import ConfigError
from tests.unit.fresh_process import fresh_output

STORE = RemoteStorage("http://127.0.0.1:8333", "us-east-1", "AKID", "sekrit")


def test_s3_paths_use_the_settings_and_keep_the_bucket_in_the_path():
    for scheme in ("s3", "s3a", "s3n"):
        fs, path = filesystem(f"{scheme}://fluss/remote/kv/snap-1/CURRENT", STORE)
        assert isinstance(fs, pafs.S3FileSystem)
        assert path == "fluss/remote/kv/snap-1/CURRENT"
    assert filesystem("s3://b/x", STORE)[0] is filesystem("s3://b/y", STORE)[0]   # one per store


def test_local_paths_ignore_the_s3_settings(tmp_path):
    fs, path = filesystem(str(tmp_path / "f"), STORE)
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "f")


def test_the_secret_key_is_never_in_a_repr():
    assert "sekrit" not in repr(STORE)
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.t",
                             "s3.endpoint": "http://127.0.0.1:8333", "s3.access-key": "AKID",
                             "s3.secret-key": "sekrit"})
    assert options.storage == RemoteStorage("http://127.0.0.1:8333", None, "AKID", "sekrit")
    assert "sekrit" not in repr(options)


def test_no_s3_option_leaves_pyarrows_defaults():
    assert parse_options({"bootstrap.servers": "h:1", "table": "db.t"}).storage is None


@pytest.mark.parametrize("options, error", [
    ({"s3.access-key": "AKID"}, "access key and secret key go together"),
    ({"s3.secret-key": "x"}, "access key and secret key go together"),
    ({"s3.endpoint": "127.0.0.1:8333"}, "must be an http:// or https:// URL"),
])
def test_bad_s3_options_are_refused_naming_what_to_do(options, error):
    with pytest.raises(ConfigError, match=error):
        parse_options({"bootstrap.servers": "h:1", "table": "db.t", **options})


def test_a_query_driver_imports_neither_compute_nor_filesystem_modules_it_does_not_use():
    """Every query starts a fresh driver-side Python process: pyarrow.compute (~25 ms) is for
    the executors' readers and the writers, pyarrow.fs (~40 ms, with its S3 module) for the
    paths that open remote files (a driver against the embedded engine never does)."""
    code = ("import sys\n"
            "def loaded(*names): return sorted(m for m in names if m in sys.modules)\n"
            "import fluss_spark.connector.source\n"
            "print(loaded('pyarrow.compute', 'pyarrow.fs', 'pyarrow._s3fs', 'pandas'))\n"
            "import fluss_spark.client.embedded, fluss_spark.client.apache_fluss.cluster\n"
            "print(loaded('pyarrow.compute', 'pandas'))\n"
            "from fluss_spark.client.remote_storage import filesystem\n"
            "filesystem('/tmp')\nprint(loaded('pyarrow.fs'))\n")
    assert fresh_output(code).split() == ["[]", "[]", "['pyarrow.fs']"]


@pytest.mark.parametrize("engine, unused", [
    ("apache-fluss", ("ssl", "msgpack", "fluss_spark.transport.tls",
                      "fluss_spark.transport.client", "fluss_spark.protocol.codec")),
    ("embedded", ("ssl", "fluss_spark.transport.tls")),
])
def test_a_query_driver_loads_no_tls_client_and_no_other_engines_wire(engine, unused):
    """ssl with the TLS client serve TLS connections only, and this project's own transport with
    its msgpack codec the embedded engine only: ~20 ms of every Apache Fluss query's start, ~7
    ms of an embedded one's, when its driver imported them. A connection attempt (refused
    here) takes the real path."""
    code = ("import socket, sys\n"
            "import fluss_spark.connector.source\n"
            "from fluss_spark.connector.options import parse_options\n"
            "from fluss_spark.errors import NetworkError\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
            "options = parse_options({'bootstrap.servers': f'127.0.0.1:{port}', "
            f"'table': 'db.t', 'engine': {engine!r}, 'client.request.timeout': '2s'}})\n"
            "try:\n"
            "    options.connect().capabilities()\n"
            "except NetworkError:\n"
            "    print('refused')\n"
            f"print(sorted(m for m in {unused!r} if m in sys.modules))\n"
            "import importlib\n"     # the names are real: the check above can fail
            f"print(len([importlib.import_module(m) for m in {unused!r}]))\n")
    assert fresh_output(code).split() == ["refused", "[]", str(len(unused))]


def test_a_query_driver_of_apache_fluss_imports_no_row_decoder():
    """The driver lists snapshots, leases them and plans splits; it decodes no row. The
    decoders and readers (kv_snapshot with the SST and compacted-row decoders, log_reader) are
    for the executors: ~30 ms of every query's start when the driver imported them."""
    readers = ("fluss_spark.client.apache_fluss.kv_snapshot",
               "fluss_spark.client.apache_fluss.log_reader",
               "fluss_spark.protocol.apache_fluss.compacted_row",
               "fluss_spark.protocol.apache_fluss.rocksdb_sst")
    code = ("import sys\n"
            "import fluss_spark.connector.source, fluss_spark.client.apache_fluss.cluster\n"
            f"print(sorted(m for m in {readers!r} if m in sys.modules))\n"
            "import importlib\n"     # the names are real: the check above can fail
            f"print(len([importlib.import_module(m) for m in {readers!r}]))\n")
    assert fresh_output(code).split() == ["[]", "4"]

"""fluss-spark argument handling and output formatting (no cluster needed)."""

from __future__ import annotations

import io
import json

import pytest

from fluss_spark import cli


def run(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.delenv("FLUSS_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(tmp_path / "no-cluster"))


@pytest.mark.parametrize("argv, needle", [
    ([], "COMMAND"),
    (["table"], "ACTION"),
    (["table", "create", "db.t"], "--schema"),
    (["produce", "db.t"], "--rows"),
    (["produce", "db.t", "--rows", "many"], "is not an integer"),
    (["scan", "db.t", "--format", "csv"], "invalid choice"),
    (["no-such-command"], "invalid choice"),
])
def test_usage_errors_are_one_line_with_status_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err


def test_help_exits_zero(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "cluster" in out and "lease" in out


def test_no_cluster_names_the_ways_to_find_one(capsys, tmp_path):
    code, out, err = run(capsys, "table", "list")
    assert code == 1 and out == ""
    assert "--bootstrap-servers" in err and "FLUSS_BOOTSTRAP_SERVERS" in err
    assert "cluster start" in err and err.count("\n") == 1


def test_bad_bootstrap_address(capsys):
    code, _, err = run(capsys, "--bootstrap-servers", "nohost", "table", "list")
    assert code == 1 and "nohost" in err and "host:port" in err


@pytest.mark.parametrize("argv, needle", [
    (["scan", "db.t", "--snapshot", "newest"], "--snapshot"),
    (["scan", "db.t", "--snapshot", "3"], "--bucket"),
    (["scan", "db.t", "--limit", "0"], "--limit"),
    (["log", "db.t", "--from", "yesterday"], "--from"),
    (["produce", "db.t", "--rows", "-1"], "--rows"),
    (["produce", "db.t", "--rows", "1", "--batch-size", "0"], "--batch-size"),
    (["lease", "acquire", "L", "db.t", "--duration", "forever"], "--duration"),
    (["cluster", "start", "--tablets", "0"], "--tablets"),
    (["cluster", "start", "--disable-api", "everything"], "everything"),
    (["cluster", "start", "--option", "kv.scanner.ttl"], "key=value"),
])
def test_argument_values_are_checked_before_connecting(capsys, argv, needle):
    # Every check here happens before any connection: the bootstrap points at nothing.
    code, out, err = run(capsys, "--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.2", *argv)
    assert code in (1, 2) and out == ""     # 2: refused by the argument parser itself
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_json_flag_works_before_and_after_the_command():
    parser = cli.build_parser()
    assert parser.parse_args(["--json", "table", "list"]).json is True
    assert parser.parse_args(["table", "list", "--json"]).json is True
    assert not hasattr(parser.parse_args(["table", "list"]), "json")
    args = parser.parse_args(["table", "list", "--bootstrap-servers", "h:1"])
    assert cli.bootstrap_servers(args) == "h:1"


def test_bootstrap_precedence(monkeypatch, tmp_path):
    parser = cli.build_parser()
    monkeypatch.setenv("FLUSS_BOOTSTRAP_SERVERS", "env:1")
    assert cli.bootstrap_servers(parser.parse_args(["table", "list"])) == "env:1"
    assert cli.bootstrap_servers(
        parser.parse_args(["--bootstrap-servers", "arg:2", "table", "list"])) == "arg:2"
    monkeypatch.delenv("FLUSS_BOOTSTRAP_SERVERS")
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.json").write_text(json.dumps({
        "version": 1, "host": "127.0.0.1", "zookeeper": {"address": "127.0.0.1:2181"},
        "servers": [{"role": "coordinator", "id": 0, "port": 5000, "pid": None},
                    {"role": "tablet", "id": 0, "port": 5001, "pid": None}]}))
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(home))
    assert cli.bootstrap_servers(parser.parse_args(["table", "list"])) == \
        "127.0.0.1:5000,127.0.0.1:5001"


def test_unknown_state_version_is_refused(monkeypatch, tmp_path, capsys):
    (tmp_path / "cluster.json").write_text(json.dumps({"version": 99}))
    monkeypatch.setenv("FLUSS_SPARK_HOME", str(tmp_path))
    code, _, err = run(capsys, "table", "list")
    assert code == 1 and "version 99" in err


def test_print_table_aligns_columns():
    out = io.StringIO()
    cli.print_table([{"bucket": 0, "pinned_by": ["a", "b"], "x": None},
                     {"bucket": 10, "pinned_by": [], "x": 1.5}], out=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["BUCKET", "PINNED_BY", "X"]
    assert lines[1].split() == ["0", "a,b"]
    assert lines[2].split() == ["10", "1.5"]
    assert lines[1].index("a,b") == lines[0].index("PINNED_BY")
    empty = io.StringIO()
    cli.print_table([], out=empty)
    assert empty.getvalue() == "(none)\n"


def test_emit_json_handles_dates_decimals_and_bytes():
    import datetime as dt
    import decimal
    out = io.StringIO()
    cli.emit_json([{"d": dt.date(2024, 1, 2), "n": decimal.Decimal("1.50"), "b": b"\x01"}], out=out)
    assert json.loads(out.getvalue()) == [{"d": "2024-01-02", "n": "1.50", "b": "01"}]


class _Tty(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_is_a_bar_on_a_terminal_and_nothing_with_json():
    from fluss_spark.cli.progress import Progress
    tty = _Tty()
    with Progress("produce db.t", 100, out=tty, lines=True) as p:
        p.add(50)
    assert "produce db.t" in tty.getvalue() and "50/100" in tty.getvalue()
    quiet = _Tty()
    with Progress("produce db.t", 100, enabled=False, out=quiet, lines=True) as p:   # --json
        p.add(10)
    assert quiet.getvalue() == ""


def test_progress_off_a_terminal_is_a_line_a_second_at_most():
    from fluss_spark.cli.progress import Progress
    log, clock = io.StringIO(), _Clock()
    with Progress("produce db.t", 300_000, out=log, lines=True, clock=clock) as p:
        p.add(10_000)                  # within the first second: nothing
        clock.now += 1.0
        p.add(90_000)
        for _ in range(8):             # eight batches in the next half second: no line
            clock.now += 0.0625
            p.add(10_000)
        clock.now += 0.5
        p.add(1)
    assert log.getvalue().splitlines() == [
        "produce db.t: 100,000/300,000 rows (33%), 100,000 rows/s",
        "produce db.t: 180,001/300,000 rows (60%), 90,000 rows/s"]
    silent = io.StringIO()             # `scan`: on a terminal only
    with Progress("scan db.t", None, out=silent, clock=clock) as p:
        clock.now += 5
        p.add(10)
    assert silent.getvalue() == ""


def _listening_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


@pytest.mark.parametrize("engine", ["embedded", "apache-fluss"])
def test_cluster_start_on_a_taken_port_fails_in_one_line_naming_it(capsys, monkeypatch, tmp_path,
                                                                   engine):
    from fluss_spark.local.apache_fluss import ApacheFlussProcesses
    monkeypatch.setattr(ApacheFlussProcesses, "jars", lambda self: [])   # no jar fetch
    holder, port = _listening_port()
    with holder:
        code, out, err = run(capsys, "cluster", "start", "--engine", engine, "--port", str(port),
                             "--dir", str(tmp_path / "c"))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err == (f"error: coordinator 0 cannot listen on port {port} of 127.0.0.1: another "
                   "process listens on it; pass another --port, or none for a free one\n")
    assert not (tmp_path / "c").exists()      # refused before anything started


@pytest.mark.parametrize("argv, needle", [
    (["--timeout", "-1", "table", "list"], "'-1' is outside 0.001..86400"),
    (["--timeout", "nan", "table", "list"], "'nan' is outside"),
    (["--timeout", "1e300", "table", "list"], "'1e300' is outside"),
    (["table", "create", "db.t", "--schema", "id BIGINT", "--buckets", "99999999999999"],
     "'99999999999999' is outside 1..1024"),
    (["produce", "db.t", "--rows", "1e30"], "'1e30' is not an integer"),
    (["scan", "db.t", "--bucket", "-3"], "'-3' is outside 0..1023"),
    (["cluster", "start", "--tablets", "100000"], "'100000' is outside 1..64"),
    (["cluster", "start", "--port", "70000"], "'70000' is outside 1..65535"),
])
def test_numbers_out_of_range_are_one_line_errors(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_tier_run_numbers_are_bounded():
    from fluss_spark.tiering.run import main as tier_main
    with pytest.raises(SystemExit) as e:
        tier_main(["--lake", "/tmp/x", "--pattern", "a", "--max-restarts", "-1"])
    assert e.value.code == 2


def test_cluster_start_engine_defaults_to_embedded(tmp_path):
    from fluss_spark.cli.cluster import start_engine
    args = cli.build_parser().parse_args(["cluster", "start", "--dir", str(tmp_path)])
    assert args.engine is None and args.fluss_version is None
    assert start_engine(args) == "embedded"


def test_cluster_start_apache_fluss_arguments(tmp_path):
    from fluss_spark.cli.cluster import start_engine
    args = cli.build_parser().parse_args(
        ["cluster", "start", "--engine", "apache-fluss", "--fluss-version", "0.9.1-incubating",
         "--dir", str(tmp_path), "--tablets", "2", "--option", "kv.snapshot.interval=5s"])
    assert (args.engine, args.fluss_version, args.tablets, args.option) == \
        ("apache-fluss", "0.9.1-incubating", 2, ["kv.snapshot.interval=5s"])
    assert start_engine(args) == "apache-fluss"


def test_cluster_start_takes_the_engine_of_the_cluster_in_its_dir(tmp_path):
    from fluss_spark.cli.cluster import start_engine
    (tmp_path / "apache-fluss.json").write_text("{}")
    args = cli.build_parser().parse_args(["cluster", "start", "--dir", str(tmp_path)])
    assert start_engine(args) == "apache-fluss"


@pytest.mark.parametrize("argv, needle", [
    (["cluster", "start", "--engine", "kafka"], "invalid choice"),
    (["cluster", "start", "--fluss-version", "0.9.1-incubating"], "--engine apache-fluss"),
    (["cluster", "start", "--engine", "apache-fluss", "--tls"], "no TLS listeners"),
    (["cluster", "start", "--engine", "apache-fluss", "--disable-api", "scan_kv"],
     "embedded engine"),
    (["cluster", "start", "--engine", "apache-fluss", "--option", "kv.snapshot.interval"],
     "key=value"),
    (["cluster", "start", "--engine", "apache-fluss", "--fluss-version", "0.0.1"], "0.0.1"),
])
def test_cluster_start_engine_errors_are_one_line(capsys, monkeypatch, tmp_path, argv, needle):
    # No download: the cache is empty and the repository unreachable, yet each error comes first.
    monkeypatch.setenv("FLUSS_SPARK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FLUSS_SPARK_MAVEN_REPOSITORY", "http://127.0.0.1:9/")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    code, out, err = run(capsys, *argv, "--dir", str(tmp_path / "c"))
    assert code in (1, 2) and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1
    assert not (tmp_path / "c" / "apache-fluss.json").exists()


def test_cluster_start_refuses_another_engine_in_the_same_dir(capsys, tmp_path):
    (tmp_path / "cluster.json").write_text("{}")
    code, _, err = run(capsys, "cluster", "start", "--engine", "apache-fluss",
                       "--dir", str(tmp_path))
    assert code == 1 and "holds a cluster of engine embedded" in err


@pytest.mark.parametrize("argv, needle", [
    (["--schema", "id BIGINT,,"], "column 2 of 3 in the schema 'id BIGINT,,' is empty"),
    (["--schema", "id BIGINT, ,v STRING"], "is empty"),
    (["--schema", "id BIGINT,"], "is empty"),
    (["--schema", "id BIGINT", "--primary-key", "id,,"], "has an empty column name"),
    (["--schema", "id BIGINT", "--bucket-key", ",id"], "has an empty column name"),
])
def test_table_create_refuses_empty_column_definitions_before_connecting(capsys, argv, needle):
    # "id BIGINT,," used to create a table (empty definitions were skipped silently).
    code, out, err = run(capsys, "--bootstrap-servers", "127.0.0.1:1", "table", "create",
                         "db.t", *argv)
    assert code == 1 and out == ""
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_version(capsys):
    from fluss_spark import __version__
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"fluss-spark {__version__}\n"


def test_a_restart_with_other_tablets_keeps_the_saved_external_zookeeper():
    from fluss_spark.cli.cluster import _saved_zookeeper
    external = {"zookeeper": {"address": "zk:2181/c", "external": True, "port": None}}
    own = {"zookeeper": {"address": "127.0.0.1:5000", "external": False, "port": 5000}}
    assert _saved_zookeeper(external) == "zk:2181/c"
    assert _saved_zookeeper(own) is None and _saved_zookeeper(None) is None

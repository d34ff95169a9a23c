"""The fluss-spark command against the shared test cluster (in process, --json parsed)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow as pa



def run_json(cli, *argv):
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_table_commands(cli, table_name):
    doc = run_json(cli, "table", "create", table_name, "--schema",
                   "id BIGINT NOT NULL, name STRING, amount DOUBLE", "--primary-key", "id",
                   "--buckets", "2", "--property", "kv.snapshot.num-retained=3")
    assert doc["table"] == table_name and doc["primary_key"] == ["id"] and doc["num_buckets"] == 2
    assert {"table": table_name} in run_json(cli, "table", "list")
    d = run_json(cli, "table", "describe", table_name)
    assert d["schema"] == "id BIGINT NOT NULL, name STRING, amount DOUBLE"
    assert d["properties"] == {"kv.snapshot.num-retained": "3"}
    assert [a["bucket"] for a in d["assignment"]] == [0, 1]
    code, out, _ = cli("table", "describe", table_name)
    assert code == 0 and "primary-key table" in out and "amount" in out
    code, out, err = cli("table", "create", table_name, "--schema", "id BIGINT")
    assert code == 1 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert table_name in err
    assert cli("table", "drop", table_name)[0] == 0
    assert {"table": table_name} not in run_json(cli, "table", "list")


def test_table_alter_adds_nullable_columns_and_refuses_the_rest_in_one_line(cli, table_name):
    cli("table", "create", table_name, "--schema", "id BIGINT NOT NULL, name STRING",
        "--primary-key", "id")
    doc = run_json(cli, "table", "alter", table_name, "--add-column", "note STRING",
                   "--add-column", "n INT")
    assert doc["schema_id"] == 2 and doc["schema"] == "id BIGINT NOT NULL, name STRING, " \
        "note STRING, n INT"
    code, out, _ = cli("table", "alter", table_name, "--add-column", "x DOUBLE")
    assert code == 0 and f"altered {table_name}: added x (schema id 3)" in out
    for column, needle in [("y INT NOT NULL", "must be nullable"),
                           ("note BIGINT", "already has a column 'note'"),
                           ("id INT", "already has a primary key column 'id'"),
                           ("z", "expected 'name TYPE'")]:
        code, out, err = cli("table", "alter", table_name, "--add-column", column)
        assert code == 1 and out == "" and err.startswith("error: ") and err.count("\n") == 1
        assert needle in err
    code, _, err = cli("table", "alter", "test.nope", "--add-column", "y INT")
    assert code == 1 and "test.nope does not exist" in err
    assert run_json(cli, "table", "describe", table_name)["schema_id"] == 3


def test_produce_log_snapshot_scan_on_a_pk_table(cli, table_name):
    cli("table", "create", table_name, "--schema", "id BIGINT, name STRING, amount DOUBLE",
        "--primary-key", "id", "--buckets", "3")
    doc = run_json(cli, "produce", table_name, "--rows", "200", "--updates", "30",
                   "--deletes", "20", "--seed", "7", "--batch-size", "64")
    assert doc == {"table": table_name, "rows": 250, "inserts": 200, "updates": 30, "deletes": 20}
    records = run_json(cli, "log", table_name)
    kinds = Counter(r["_change_type"] for r in records)
    assert kinds == {"+I": 200, "-U": 30, "+U": 30, "-D": 20}
    assert {r["_bucket"] for r in records} == {0, 1, 2}
    snaps = run_json(cli, "snapshot", "trigger", table_name)
    assert sorted(s["bucket"] for s in snaps) == [0, 1, 2]
    assert sum(s["row_count"] for s in snaps) == 180
    listed = run_json(cli, "snapshot", "list", table_name)
    assert {(s["bucket"], s["snapshot_id"]) for s in listed} >= \
        {(s["bucket"], s["snapshot_id"]) for s in snaps}
    assert all(set(s) >= {"bucket", "snapshot_id", "log_offset", "row_count", "pinned_by"}
               for s in listed)
    rows = run_json(cli, "scan", table_name)
    assert len(rows) == 180 and len({r["id"] for r in rows}) == 180
    assert set(rows[0]) == {"id", "name", "amount"}
    limited = run_json(cli, "scan", table_name, "--limit", "5", "--columns", "name,id")
    assert len(limited) == 5 and list(limited[0]) == ["name", "id"]
    live = run_json(cli, "scan", table_name, "--snapshot", "live", "--bucket", "1")
    assert len(live) == next(s["row_count"] for s in snaps if s["bucket"] == 1)
    code, out, _ = cli("scan", table_name, "--limit", "3")
    assert code == 0 and out.splitlines()[0].split() == ["ID", "NAME", "AMOUNT"]
    assert len(out.splitlines()) == 4


def test_produce_is_deterministic_for_a_seed(cli, table_name):
    for suffix in ("_a", "_b"):
        cli("table", "create", table_name + suffix, "--schema", "id INT, name STRING, d DATE",
            "--primary-key", "id")
        run_json(cli, "produce", table_name + suffix, "--rows", "30", "--updates", "10",
                 "--seed", "3")
    a, b = (run_json(cli, "log", table_name + s, "--columns", "id,name,d") for s in ("_a", "_b"))

    def strip(rows):
        return [(r["id"], r["name"], r["d"], r["_change_type"]) for r in rows]

    assert strip(a) == strip(b) and len(a) == 50


def test_produce_and_log_on_a_log_table(cli, table_name):
    cli("table", "create", table_name, "--schema", "id BIGINT, ts TIMESTAMP_LTZ, ok BOOLEAN",
        "--buckets", "2")
    assert run_json(cli, "produce", table_name, "--rows", "25")["appends"] == 25
    recs = run_json(cli, "log", table_name, "--limit", "10")
    assert 10 <= len(recs) <= 20 and {r["_change_type"] for r in recs} == {"+A"}
    code, _, err = cli("produce", table_name, "--rows", "1", "--updates", "1")
    assert code == 1 and "log table" in err
    code, _, err = cli("scan", table_name)
    assert code == 1 and "log table" in err


def test_lease_commands(cli, table_name):
    cli("table", "create", table_name, "--schema", "id BIGINT", "--primary-key", "id",
        "--buckets", "2")
    code, _, err = cli("lease", "acquire", "cli-lease", table_name)
    assert code == 1 and "snapshot trigger" in err
    code, _, err = cli("scan", table_name)
    assert code == 1 and "--snapshot live" in err
    run_json(cli, "produce", table_name, "--rows", "10")
    snaps = run_json(cli, "snapshot", "trigger", table_name)
    lease_id = "cli-" + table_name.split("_")[-1]
    acq = run_json(cli, "lease", "acquire", lease_id, table_name, "--duration", "10min")
    assert acq["unavailable"] == [] and sorted(p["bucket"] for p in acq["pinned"]) == [0, 1]
    leases = {d["lease_id"]: d for d in run_json(cli, "lease", "list")}
    assert leases[lease_id]["pin_count"] == 2
    assert leases[lease_id]["tables"][0]["table"] == table_name
    desc = run_json(cli, "lease", "describe", lease_id)
    assert {(p["bucket"], p["snapshot_id"]) for p in desc["tables"][0]["pins"]} == \
        {(s["bucket"], s["snapshot_id"]) for s in snaps}
    listed = run_json(cli, "snapshot", "list", table_name)
    assert all(lease_id in s["pinned_by"] for s in listed)
    renewed = run_json(cli, "lease", "renew", lease_id, "--duration", "1h")
    assert renewed["expires_at_ms"] > desc["expires_at_ms"]
    metrics = run_json(cli, "metrics")
    assert metrics["metrics"]["lease_count"] >= 1
    rel = run_json(cli, "lease", "release", lease_id, table_name)
    assert rel["remaining_pins"] == 0
    code, _, err = cli("lease", "describe", lease_id)
    assert code == 1 and lease_id in err and err.count("\n") == 1
    # Releasing a lease that no longer exists fails, naming it (it used to report success).
    code, out, err = cli("lease", "release", lease_id, table_name)
    assert code != 0 and out == "" and lease_id in err and "does not exist" in err
    assert err.count("\n") == 1
    run_json(cli, "lease", "acquire", lease_id, table_name)
    assert run_json(cli, "lease", "drop", lease_id) == {"lease_id": lease_id, "dropped": True}
    assert lease_id not in {d["lease_id"] for d in run_json(cli, "lease", "list")}
    code, out, err = cli("lease", "drop", lease_id)
    assert code == 1 and out == "" and "does not exist" in err and err.count("\n") == 1


def test_scanner_list_and_metrics(cli):
    assert isinstance(run_json(cli, "scanner", "list"), list)
    code, out, _ = cli("metrics")
    assert code == 0 and "table_count" in out


def test_unknown_table_is_one_line_error(cli):
    for argv in (["table", "describe", "db.nope"], ["produce", "db.nope", "--rows", "1"],
                 ["snapshot", "list", "db.nope"], ["log", "db.nope"]):
        code, out, err = cli(*argv)
        assert code == 1 and out == "" and err.count("\n") == 1
        assert err.startswith("error: ") and "db.nope" in err


def test_bad_schema_is_one_line_error(cli, table_name):
    code, _, err = cli("table", "create", table_name, "--schema", "id WIBBLE")
    assert code == 1 and "WIBBLE" in err and err.count("\n") == 1


def test_scan_arrow_format_as_a_subprocess(cluster, table_name):
    def fs(*argv, binary=False):
        return subprocess.run([sys.executable, "-m", "fluss_spark.cli", "--bootstrap-servers",
                               cluster.bootstrap_servers, *argv], capture_output=True,
                              text=not binary, timeout=120)
    assert fs("table", "create", table_name, "--schema", "id BIGINT, v STRING",
              "--primary-key", "id").returncode == 0
    assert fs("produce", table_name, "--rows", "40").returncode == 0
    assert fs("snapshot", "trigger", table_name).returncode == 0
    res = fs("scan", table_name, "--format", "arrow", binary=True)
    assert res.returncode == 0, res.stderr
    table = pa.ipc.open_stream(res.stdout).read_all()
    assert table.num_rows == 40 and table.schema.names == ["id", "v"]
    assert sorted(table.column("id").to_pylist()) == list(range(40))
    bad = fs("table", "describe", "db.nope")
    assert (bad.returncode == 1 and bad.stderr.startswith("error: ")
            and "Traceback" not in bad.stderr)

"""`fluss-spark lease list/describe` show the holder (query) of each table a lease pins."""

import json

from fluss_spark.cli import main


def test_lease_list_and_describe_show_holders(cluster, conn, table_name, capsys):
    admin = conn.admin()
    admin.create_table(table_name, "id BIGINT NOT NULL", primary_key=["id"], num_buckets=1)
    conn.writer(table_name).upsert([{"id": 1}])
    snap = admin.trigger_kv_snapshot(table_name)[0]
    lease_id = "holders-" + table_name.split("_")[-1]
    admin.acquire_kv_snapshot_lease(lease_id, 600_000, {snap.table_id: {0: snap.snapshot_id}},
                                    holder="query-a")

    def run(*argv):
        code = main(["--bootstrap-servers", cluster.bootstrap_servers, "lease", *argv])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    desc = json.loads(run("describe", lease_id, "--json"))
    assert desc["holders"] == {str(snap.table_id): "query-a"}   # JSON object keys are strings
    assert desc["tables"][0]["holder"] == "query-a"
    listed = {d["lease_id"]: d for d in json.loads(run("list", "--json"))}
    assert listed[lease_id]["holders"] == {str(snap.table_id): "query-a"}
    assert "HOLDER" in run("describe", lease_id) and "query-a" in run("describe", lease_id)
    line = next(ln for ln in run("list").splitlines() if ln.startswith(lease_id))
    assert line.rstrip().endswith("query-a")
    admin.drop_kv_snapshot_lease(lease_id)

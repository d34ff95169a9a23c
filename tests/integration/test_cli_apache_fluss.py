"""The fluss-spark command against a real Apache Fluss cluster: what both engines serve works,
what Apache Fluss lacks fails in one line that says so."""

from __future__ import annotations

import json
import uuid

import pytest

from fluss_spark.cli import main
from fluss_spark.testing.apache_fluss import PyFluss


@pytest.fixture
def cli(apache_fluss, capsys):
    def run(*argv):
        code = main(["--bootstrap-servers", apache_fluss.bootstrap_servers, *argv])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def test_tables_and_leases_work_and_the_rest_says_what_is_missing(cli, apache_fluss):
    name = f"cli.t_{uuid.uuid4().hex[:8]}"
    with PyFluss(apache_fluss.bootstrap_servers) as fluss:
        fluss.create_table(name, "id BIGINT NOT NULL, v STRING", primary_key=["id"], buckets=2)
    code, out, err = cli("table", "list", "--json")
    assert code == 0, err
    assert {"table": name} in json.loads(out)
    code, out, err = cli("table", "describe", name, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["primary_key"] == ["id"] and doc["num_buckets"] == 2
    code, out, err = cli("lease", "release", "cli-lease", name)
    assert code == 0 and f"released {name} from lease cli-lease" in out, err
    code, out, err = cli("lease", "drop", "cli-lease")
    assert code == 0, err
    for argv, why in [(("lease", "list"), "no call that lists leases"),
                      (("lease", "renew", "cli-lease"), "use `lease acquire`"),
                      (("snapshot", "trigger", name), "kv.snapshot.interval"),
                      (("scanner", "list"), "no scan sessions")]:
        code, out, err = cli(*argv)
        assert code != 0 and out == "" and err.count("\n") == 1, (argv, err)
        assert "not available on Apache Fluss" in err and why in err, err

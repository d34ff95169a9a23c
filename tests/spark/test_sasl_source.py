"""format("fluss") against a cluster that requires SASL PLAIN: credentials as options."""

from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from fluss_spark.local.ports import wait_until


pytestmark = pytest.mark.spark

@pytest.fixture(scope="module")
def sasl_table(sasl_cluster):
    with sasl_cluster.connection() as conn:
        conn.admin().create_table("sec.t", "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                                  num_buckets=2)
        conn.writer("sec.t").upsert(pa.table({"id": pa.array(range(100), pa.int64()),
                                              "v": [f"v{i}" for i in range(100)]}))
        conn.admin().trigger_kv_snapshot("sec.t")
    # The readers' ACL reaches each server within a poll of ZooKeeper (server/authorizer.py),
    # later on a loaded machine: the tests start once the tablet enforces it.
    wait_until(lambda: _reader_may_list_offsets(sasl_cluster), 30,
               "the readers' ACL enforced by the tablet server")
    return sasl_cluster


def _reader_may_list_offsets(cluster) -> bool:
    from fluss_spark.client import FlussConnection
    from fluss_spark.errors import AuthorizationFailed
    with FlussConnection(cluster.bootstrap_servers, username="reader",
                         password="s3cr3t-pw") as conn:
        try:
            conn.admin().list_offsets("sec.t", spec="latest")
            return True
        except AuthorizationFailed:
            return False


def reader(spark, cluster, **options):
    r = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("table", "sec.t"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_a_batch_read_with_credentials_returns_the_table(spark, sasl_table):
    df = reader(spark, sasl_table, **{"client.security.sasl.username": "reader",
                                        "client.security.sasl.password": "s3cr3t-pw"})
    expected = spark.createDataFrame([(i, f"v{i}") for i in range(100)], "id long, v string")
    assert_df_equality(df.select("id", "v"), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_without_or_with_wrong_credentials_the_read_fails_clearly_and_hides_the_password(
        spark, sasl_table):
    with pytest.raises(Exception) as err:
        reader(spark, sasl_table).collect()
    assert "requires SASL authentication" in str(err.value)
    with pytest.raises(Exception) as err:
        reader(spark, sasl_table, **{"client.security.sasl.username": "reader",
                                       "client.security.sasl.password": "not-the-pw-123"}
               ).collect()
    assert "wrong username or password" in str(err.value)
    assert "not-the-pw-123" not in str(err.value)

"""format("fluss") against a cluster that requires SASL PLAIN: credentials as options."""

from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality


pytestmark = pytest.mark.spark

@pytest.fixture(scope="module")
def sasl_table(sasl_cluster):
    with sasl_cluster.connection() as conn:
        conn.admin().create_table("sec.t", "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                                  num_buckets=2)
        conn.writer("sec.t").upsert(pa.table({"id": pa.array(range(100), pa.int64()),
                                              "v": [f"v{i}" for i in range(100)]}))
        conn.admin().trigger_kv_snapshot("sec.t")
    return sasl_cluster


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

"""format("fluss") against a cluster that requires SASL PLAIN: credentials as options."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from fluss_spark.testing.cluster import LocalCluster

pytestmark = pytest.mark.spark

USERS = "admin:admin-secret\ninternal:internal-secret\nreader:s3cr3t-pw\n"


@pytest.fixture(scope="module")
def sasl_cluster(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("sasl-spark")
    cluster = LocalCluster(base / "c", tablets=1, sasl=True,
                           zookeeper=f"{zookeeper.address}/fluss-sasl-{uuid.uuid4().hex[:12]}")
    cluster.users_file.parent.mkdir(parents=True)
    cluster.users_file.write_text(USERS)
    cluster.start()
    with cluster.connection() as conn:
        conn.admin().create_table("sec.t", "id BIGINT NOT NULL, v STRING", primary_key=["id"],
                                  num_buckets=2)
        conn.writer("sec.t").upsert(pa.table({"id": pa.array(range(100), pa.int64()),
                                              "v": [f"v{i}" for i in range(100)]}))
        conn.admin().trigger_kv_snapshot("sec.t")
    yield cluster
    cluster.stop()


def reader(spark, cluster, **options):
    r = (spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("table", "sec.t"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_a_batch_read_with_credentials_returns_the_table(spark, sasl_cluster):
    df = reader(spark, sasl_cluster, **{"client.security.sasl.username": "reader",
                                        "client.security.sasl.password": "s3cr3t-pw"})
    expected = spark.createDataFrame([(i, f"v{i}") for i in range(100)], "id long, v string")
    assert_df_equality(df.select("id", "v"), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_without_or_with_wrong_credentials_the_read_fails_clearly_and_hides_the_password(
        spark, sasl_cluster):
    with pytest.raises(Exception) as err:
        reader(spark, sasl_cluster).collect()
    assert "requires SASL authentication" in str(err.value)
    with pytest.raises(Exception) as err:
        reader(spark, sasl_cluster, **{"client.security.sasl.username": "reader",
                                       "client.security.sasl.password": "not-the-pw-123"}
               ).collect()
    assert "wrong username or password" in str(err.value)
    assert "not-the-pw-123" not in str(err.value)

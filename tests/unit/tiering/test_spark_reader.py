"""The lake's pyiceberg catalog properties as Iceberg's Java catalogs take them (no Spark)."""

from __future__ import annotations

from fluss_spark.tiering.spark_reader import S3_FILE_IO, java_properties


def test_an_s3_warehouse_is_read_with_s3_file_io_path_style():
    props = {"type": "sql", "uri": "sqlite:////l/_tiering/catalog.db",
             "warehouse": "s3://fluss/lake", "s3.endpoint": "http://127.0.0.1:9000",
             "s3.region": "us-east-1", "s3.access-key-id": "k", "s3.secret-access-key": "s"}
    assert java_properties(props) == {
        "warehouse": "s3://fluss/lake", "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "us-east-1", "s3.access-key-id": "k", "s3.secret-access-key": "s",
        "io-impl": S3_FILE_IO, "s3.path-style-access": "true", "client.region": "us-east-1"}
    virtual = java_properties({**props, "s3.force-virtual-addressing": "true"})
    assert virtual["s3.path-style-access"] == "false"


def test_a_local_warehouse_keeps_its_properties():
    assert java_properties({"type": "sql", "uri": "sqlite:////l/c.db",
                            "warehouse": "file:///l"}) == {"warehouse": "file:///l"}

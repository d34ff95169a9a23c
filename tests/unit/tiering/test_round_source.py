"""The tiering source's tasks read their splits and write them as lake files (no Spark)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition

from fluss_spark.connector.options import parse_options
from fluss_spark.connector.readers import cached_cluster
from fluss_spark.connector.splits import LogSplit, SnapshotSplit
from fluss_spark.errors import ConfigError
from fluss_spark.testing.fake_cluster import FakeCluster
from fluss_spark.tiering.lake import LakeTable
from fluss_spark.tiering.round_files import _RESULT as RESULT
from fluss_spark.tiering.round_files import RoundFiles
from fluss_spark.tiering.round_source import (WRITER_OPTION, BucketSplits, RoundReader,
                                              RoundSource, one_task_per_bucket)


def test_a_buckets_splits_share_a_task_unless_they_are_all_snapshot_rows():
    snap = [SnapshotSplit(1, "db.t", 0, 7, lo, lo + 5) for lo in (0, 5)]
    mixed = [SnapshotSplit(1, "db.t", 1, 7, 0, 5), LogSplit(1, "db.t", 1, 3, 9)]
    alone = LogSplit(1, "db.t", 2, 0, 4)
    other_partition = LogSplit(1, "db.t", 2, 0, 4, "p", 9)
    stand_in = InputPartition(None)
    out = one_task_per_bucket([*snap, *mixed, alone, other_partition, stand_in])
    assert out == [*snap, BucketSplits(tuple(mixed)), alone, other_partition, stand_in]


@pytest.fixture
def fluss():
    cluster = FakeCluster()
    cluster.add_table("db.pk", schema="id BIGINT NOT NULL, v STRING", buckets=1)
    cluster.add_snapshot("db.pk", 0, 4, [{"id": i, "v": f"s{i}"} for i in range(6)], 0)
    # After the snapshot: key 1 updated, key 2 deleted, key 42 inserted.
    changes = [("-U", 1, "s1"), ("+U", 1, "new"), ("-D", 2, "s2"), ("+I", 42, "n")]
    cluster.append_log("db.pk", 0, [(ct, {"id": k, "v": v}) for ct, k, v in changes])
    return cluster


def test_a_task_reading_a_snapshot_and_its_changelog_writes_the_buckets_state(tmp_path, fluss):
    info = fluss.get_table("db.pk")
    lake = LakeTable.open(tmp_path, "db.pk")
    lake.create(table="db.pk", table_id=info.table_id, schema=info.schema, primary_key=["id"])
    options = parse_options({"bootstrap.servers": "h:1", "table": "db.pk"})
    source = RoundSource({"bootstrap.servers": "h:1", "table": "db.pk",
                          WRITER_OPTION: lake.writer().to_json()})
    shipped = pickle.loads(pickle.dumps(source.streamReader(source.schema())))
    assert shipped.writer == lake.writer() and shipped.cluster_factory is cached_cluster
    reader = RoundReader(options, shipped.writer, cluster_factory=lambda _: fluss)
    task = BucketSplits((SnapshotSplit(info.table_id, "db.pk", 0, 4, 0, 6, "L", 0),
                         LogSplit(info.table_id, "db.pk", 0, 0, 4)))
    results = pa.Table.from_batches(list(reader.read(task)), schema=RESULT)
    written = RoundFiles.merge(results, ("id",))
    assert written.rows_in == 6 + 4
    lake.commit_files(written, query_id="q", batch_id=0, fluss_offsets={"log": {"0": 4}})
    assert lake.read().sort_by("id").to_pylist() == fluss.state("db.pk", 0)


def test_the_source_is_refused_without_its_writer():
    with pytest.raises(ConfigError, match="tier.writer.*format\\('fluss'\\)"):
        RoundSource({"bootstrap.servers": "h:1", "table": "db.pk"}).streamReader(None)

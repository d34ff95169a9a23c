"""The pausing tiering job of the kill -9 tests stops where it says, with the lake as it says."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from fluss_spark.testing import tier_pause
from fluss_spark.tiering.lake import LakeTable

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("v", pa.string())])


def _round(ids):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids],
                     "_change_type": ["+A"] * len(ids),
                     "_log_offset": pa.array(range(len(ids)), pa.int64())})


@pytest.mark.parametrize("point, committed", [("mid-commit", False), ("after-commit", True)])
def test_a_round_pauses_at_its_point_once(tmp_path, monkeypatch, point, committed):
    lake = LakeTable.open(tmp_path / "lake", "db.log")
    lake.create(table="db.log", table_id=1, schema=SCHEMA)   # a commit outside any round
    marker = tmp_path / "in-round"
    seen = []
    tier_pause.install(point, 7.0, marker, patch=monkeypatch.setattr,
                       sleep=lambda s: seen.append((s, lake.state().snapshot_id is not None,
                                                    marker.read_text())))
    assert not marker.exists()
    lake.commit_round(_round([1, 2]), query_id="q", batch_id=0)
    assert seen == [(7.0, committed, str(os.getpid()))]
    assert lake.state().commit.batch_id == 0


def test_an_unknown_point_is_refused(tmp_path):
    with pytest.raises(ValueError, match="before-commit, mid-commit, after-commit"):
        tier_pause.install("later", 1.0, tmp_path / "m")

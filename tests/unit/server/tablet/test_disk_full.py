"""A write that fails for lack of disk space is logged: one clear line per bucket and interval."""

from __future__ import annotations

import errno
import logging

import pyarrow as pa
import pytest

from fluss_spark.errors import LogStorageError
from fluss_spark.server.tablet import disk_full
from fluss_spark.server.tablet.changelog import Changelog
from fluss_spark.testing.clock import FakeClock


class _FullDisk:
    """The active segment file of a changelog on a full disk: every write fails with ENOSPC."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._f, name)


def _batch(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "_change_type": ["+A"] * n,
                     "_commit_timestamp": pa.array([0] * n, pa.int64())})


@pytest.fixture
def clock(monkeypatch):
    clock = FakeClock(1_000_000)
    monkeypatch.setattr(disk_full, "_reporter", disk_full._Reporter(clock=clock.seconds))
    return clock


def _lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == disk_full.__name__ and r.levelno == logging.ERROR]


def test_a_full_disk_is_logged_once_per_interval_naming_the_bucket_and_path(tmp_path, caplog,
                                                                            clock):
    label = "table db.t (id 3) bucket 1"
    log = Changelog(tmp_path / "log", label=label)
    log.append(_batch(2), 1)
    segment = log._segments[-1].path
    log._file = _FullDisk(log._file)
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            with pytest.raises(LogStorageError, match="No space left"):
                log.append(_batch(1), 2)
        lines = _lines(caplog)
        # Nothing was logged before: the client got LOG_STORAGE_ERROR, the operator nothing.
        assert len(lines) == 1, lines
        assert label in lines[0] and str(segment) in lines[0]
        assert "no space left" in lines[0]
        clock.advance(disk_full.INTERVAL_S * 1000)
        with pytest.raises(LogStorageError):
            log.append(_batch(1), 3)
        lines = _lines(caplog)
        assert len(lines) == 2 and "4 more failed writes" in lines[1], lines
    log._file = log._file._f
    assert log.end_offset == 2           # nothing half-written stayed behind
    log.close()


def test_other_write_errors_and_other_buckets_are_not_folded_in(caplog, clock):
    with caplog.at_level(logging.INFO):
        assert not disk_full.report("b1", "/p", "writing", OSError(errno.EIO, "I/O error"))
        assert disk_full.report("b1", "/p", "writing", RuntimeError(
            "IO error: No space left on device: While appending to file: /p/000012.log"))
        assert disk_full.report("b2", "/q", "writing", OSError(errno.EDQUOT, "quota"))
        assert disk_full.report("b1", "/p", "writing", OSError(errno.ENOSPC, "full"))
    lines = _lines(caplog)
    assert len(lines) == 2 and lines[0].startswith("b1: ") and lines[1].startswith("b2: ")

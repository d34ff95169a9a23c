"""Client read of Apache Fluss KV snapshot checkpoints: the compiled decode against numpy, paired.

Run::

    .venv/bin/python bench/bench_snapshot_decode.py --rows 1000000 [--buckets 2] [--repeat 9] \
        [--threads N]
    .venv/bin/python bench/bench_snapshot_decode.py --checkpoint DIR [--checkpoint DIR ...]

Without ``--checkpoint`` it writes ``--rows`` rows of the snapshot bench's table (``id BIGINT NOT
NULL, v STRING, amount DOUBLE``) as KV values into ``--buckets`` RocksDB databases laid out as
Apache Fluss 0.9.1 writes its KV store, 4 level-0 files each with some keys updated
(``bench/kv_checkpoints.py``); with it, it reads the SST files of those directories (e.g.
copies of bench/bench_apache_fluss_snapshot.py's Apache Fluss checkpoints).

A read is what a Spark split does with a bucket: ``kv_snapshot.CheckpointScan`` of every
bucket, one after the other, into 4 MiB Arrow batches, with a cache of its own (so each read
reads and decodes the files again). Each repeat reads once with the compiled decode
(``native/``) and once with numpy, alternating which goes first, and checks that both gave
the same batches. Printed: min / median / max of the wall and CPU seconds of a read, and the
paired ratio numpy / compiled of each repeat (above 1: the compiled read is faster).
``--threads`` sets the compiled decode's thread budget (``compiled.use_threads``; default:
every CPU of the process; a Spark task uses ``spark.task.cpus``, 1 by default).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from fluss_spark.client.apache_fluss import kv_snapshot
from fluss_spark.client.apache_fluss.checkpoint_cache import CheckpointCache
from fluss_spark.client.apache_fluss.snapshot_files import KvSnapshotFiles
from fluss_spark.protocol.apache_fluss import compiled
from kv_checkpoints import SCHEMA, write_buckets  # bench/kv_checkpoints.py


def snapshot_files(directory: Path, bucket: int) -> KvSnapshotFiles:
    names = sorted(p.name for p in directory.iterdir()
                   if p.suffix == ".sst" or p.name.startswith(("CURRENT", "MANIFEST", "OPTIONS")))
    return KvSnapshotFiles("bench.kv", bucket, 1, 0,
                           tuple((str(directory / n), n) for n in names))


def read(dirs: list[Path], root: Path) -> tuple[float, float, list[pa.RecordBatch]]:
    """One read of every bucket: (wall seconds, CPU seconds, the batches)."""
    cache = CheckpointCache(root=str(root))
    wall, cpu = time.perf_counter(), time.process_time()
    batches: list[pa.RecordBatch] = []
    for bucket, directory in enumerate(dirs):
        files = snapshot_files(directory, bucket)
        batches += kv_snapshot.CheckpointScan(lambda files=files: files, lambda _: SCHEMA, SCHEMA,
                                              start_row=0, limit=None,
                                              batch_size_bytes=4 << 20, cache=cache)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    cache.clear()
    return wall, cpu, batches


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--threads", type=int, default=None,
                    help="the compiled decode's thread budget (default: every CPU)")
    ap.add_argument("--checkpoint", action="append", type=Path, default=[],
                    help="a directory of SST files (repeatable); default: write --rows rows")
    args = ap.parse_args()
    compiled.use_threads(args.threads)
    if compiled.native() is None:
        raise SystemExit("this install has no compiled decode (native/): install the package "
                         "where cargo is on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        dirs = args.checkpoint or write_buckets(Path(tmp) / "data", args.rows, args.buckets)
        root = Path(tmp) / "cache"
        root.mkdir()
        times: dict[str, list[tuple[float, float]]] = {"compiled": [], "numpy": []}
        for warm_up in (True, False):
            for rep in range(1 if warm_up else args.repeat):
                order = ("compiled", "numpy") if rep % 2 == 0 else ("numpy", "compiled")
                got = {}
                for name in order:
                    compiled.enabled = name == "compiled"
                    wall, cpu, got[name] = read(dirs, root)
                    if not warm_up:
                        times[name].append((wall, cpu))
                compiled.enabled = True
                rows = sum(b.num_rows for b in got["compiled"])
                assert pa.Table.from_batches(got["compiled"]).equals(
                    pa.Table.from_batches(got["numpy"])), "the decodes disagree"
    print(f"{rows:,} rows in {len(dirs)} bucket(s), {args.repeat} paired reads, "
          f"{compiled.threads} thread(s) (min / median / max)")
    for name, pairs in times.items():
        print(f"{name:9} wall {spread([w for w, _ in pairs])} s   "
              f"CPU {spread([c for _, c in pairs])} s")
    ratio = [n[0] / c[0] for n, c in zip(times["numpy"], times["compiled"])]
    print(f"paired numpy / compiled, wall: {spread(ratio)}")


if __name__ == "__main__":
    main()

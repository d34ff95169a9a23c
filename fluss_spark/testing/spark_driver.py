"""A Spark driver in a process of its own, for tests that kill it (kill -9) at a chosen point.

The driver streams one table of a cluster into ``out/batch=<id>`` parquet directories through
``foreachBatch``, with ``maxOffsetsPerTrigger`` and any other source options; its stdout lines
(``LOADED``, ``TRIGGERED``, ``IN_BATCH <id>``, ``BEFORE_READ <id>``) tell the test where it is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fluss_spark.local.ports import wait_until

DRIVER = """
import json, os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
servers, table, out, ckpt, block_at, hold, options, before_read = sys.argv[1:9]
builder = (SparkSession.builder.master(os.environ.get("DRIVER_MASTER", "local[2]"))
           .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
for key, value in json.loads(os.environ.get("DRIVER_CONF", "{}")).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
if os.environ.get("DRIVER_REGISTER") == "1":
    # Registered here, the source's executors run PYSPARK_PYTHON (their node's Python).
    from fluss_spark.connector.source import FlussDataSource
    spark.dataSource.register(FlussDataSource)

def sink(df, batch_id):
    if batch_id == int(block_at) and before_read == "1":
        # Blocks before the DataFrame is touched: the batch is planned (its offset logged, its
        # lease acquired) but no split of it is read.
        print(f"BEFORE_READ {batch_id}", flush=True)
        time.sleep(3600)
    df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
    if batch_id == int(block_at):      # a sink that never returns: batch stays uncommitted
        print(f"IN_BATCH {batch_id}", flush=True)
        time.sleep(3600)

reader = (spark.readStream.format("fluss").option("bootstrap.servers", servers)
          .option("table", table))
for key, value in json.loads(options).items():
    reader = reader.option(key, value)
df = reader.load()
if hold == "1":                        # the test stops the coordinator before the query starts
    print("LOADED", flush=True)
    sys.stdin.readline()
q = (df.writeStream.option("checkpointLocation", ckpt).foreachBatch(sink)
     .trigger(processingTime="300 milliseconds").start())
while q.lastProgress is None:
    time.sleep(0.1)
print("TRIGGERED", flush=True)
q.awaitTermination()
"""


class Driver:
    """A Spark driver process whose stdout lines the test waits on.

    ``args``: bootstrap servers, table, output dir, checkpoint dir, the batch id whose sink never
    returns (-1: none), and "1" to wait for a line on stdin before starting the query;
    ``options``: more source options (e.g. maxOffsetsPerTrigger); ``before_read``: that batch's
    sink prints ``BEFORE_READ <id>`` and blocks before reading the batch (else it writes the batch,
    prints ``IN_BATCH <id>`` and blocks); ``env``: more environment, e.g. ``DRIVER_MASTER`` (a
    master URL instead of ``local[2]``), ``DRIVER_CONF`` (JSON of Spark settings),
    ``DRIVER_REGISTER=1`` (register the source in the session) and ``PYSPARK_PYTHON``."""

    def __init__(self, tmp_path: Path, *args: str, options: dict[str, str] | None = None,
                 before_read: bool = False, env: dict[str, str] | None = None):
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        self.log_path = tmp_path / "driver.log"
        self.proc = subprocess.Popen([sys.executable, str(script), *args,
                                      json.dumps(options or {}), "1" if before_read else "0"],
                                     start_new_session=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log_path.open("w"), text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, line: str, what: str, timeout_s: float = 180) -> None:
        wait_until(lambda: line in self.lines or self.proc.poll() is not None, timeout_s, what)
        assert line in self.lines, (f"the first driver exited ({self.proc.returncode}) before "
                                    f"{what}; its log ends:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the driver's stderr (Spark's log and any Python traceback)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def has_source_runner(self) -> bool:
        """Whether Spark started the query's driver-side source process (it plans the offsets)."""
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if (os.getpgid(int(pid)) == self.proc.pid and b"python_streaming_source_runner"
                        in Path(f"/proc/{pid}/cmdline").read_bytes()):
                    return True
            except (OSError, ProcessLookupError):
                continue
        return False

    def kill_planning_first_offset(self, coordinator_pid: int) -> None:
        """Start the query held at ``LOADED`` with the coordinator stopped (SIGSTOP), so that its
        source hangs planning its first offset, and kill -9 the driver there."""
        os.kill(coordinator_pid, signal.SIGSTOP)
        try:
            self.go()
            wait_until(self.has_source_runner, 120, "the query's source process")
            self.kill()
        finally:
            os.kill(coordinator_pid, signal.SIGCONT)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # killed already
        self.proc.wait(30)

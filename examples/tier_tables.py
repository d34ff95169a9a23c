"""Tier Fluss tables into a lake: keep Apache Iceberg copies of every table matching a pattern.

A long-running Spark job (``fluss_spark.tiering``): one checkpointed streaming query per table,
all under one job-scoped KV snapshot lease. Log tables are appended; primary-key tables are kept
equal to the table (``+I/-U/+U/-D`` applied in order per key). Each round is one Iceberg commit
whose snapshot summary holds the round's Fluss offsets, batch id and lease id, so a crash and
restart never applies a round twice. Progress per table: ``fluss-spark tier status --lake DIR``.
See docs/tiering.md.

Run (until killed; ``--once`` catches up and exits, ``--duration S`` stops after S seconds)::

    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2,4]" examples/tier_tables.py \\
        --bootstrap-servers 127.0.0.1:9123 --lake /tmp/lake --pattern 'demo\\..*'

Restart it with the same command after a crash: it continues from its checkpoints in
``/tmp/lake/_tiering/checkpoints``.
"""

from __future__ import annotations

import sys

from fluss_spark.tiering.run import main

if __name__ == "__main__":
    sys.exit(main())

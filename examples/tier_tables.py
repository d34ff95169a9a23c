"""Tier Fluss tables into a lake: keep Apache Iceberg copies of every table matching a pattern.

A long-running Spark job (``fluss_spark.tiering``): one checkpointed streaming query per table,
all under one job-scoped KV snapshot lease. Log tables are appended; primary-key tables are kept
equal to the table (``+I/-U/+U/-D`` applied in order per key). Each round is one Iceberg commit
whose snapshot summary holds the round's Fluss offsets, batch id and lease id, so a crash and
restart never applies a round twice. While it runs it prints a line per round on stderr, and
each table's status on ``kill -USR1 <pid>``; from elsewhere: ``fluss-spark tier status --lake
DIR``. The bootstrap servers are ``--bootstrap-servers``, else ``$FLUSS_BOOTSTRAP_SERVERS``.
See docs/tiering.md.

Run (until killed; ``--once`` catches up and exits, ``--duration S`` stops after S seconds)::

    export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start)
    PYSPARK_PYTHON=$(which python) spark-submit --master "local[2,4]" examples/tier_tables.py \\
        --lake /tmp/lake --pattern 'demo\\..*'

Restart it with the same command after a crash: it continues from its checkpoints in
``/tmp/lake/_tiering/checkpoints``.
"""

from __future__ import annotations

import sys

from fluss_spark.tiering.run import main

if __name__ == "__main__":
    sys.exit(main())

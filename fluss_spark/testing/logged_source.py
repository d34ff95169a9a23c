"""``format("fluss_logged")``: the fluss source, whose driver-side process also writes its
warnings to a file a test can read.

A stream's offsets are planned in a Python process Spark starts for the source on the driver
(docs/spark_source.md, "How the source meets Spark"); what it logs reaches the driver JVM's
stderr, which a test in the same SparkSession cannot read. This source takes one more option,
``log.file``: every record of ``fluss_spark`` at WARNING or above is appended to that file too.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.types import StructType

from fluss_spark.connector.options import SourceOptions, parse_options
from fluss_spark.connector.source import FlussDataSource, FlussStreamReader

#: The option naming the file the warnings go to.
LOG_FILE = "log.file"


class LoggedFlussDataSource(FlussDataSource):
    """The fluss source with option ``log.file`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "fluss_logged"

    def _options(self) -> SourceOptions:
        return parse_options({k: v for k, v in dict(self.options).items()
                              if k.lower() != LOG_FILE})

    def streamReader(self, schema: StructType) -> FlussStreamReader:
        path: Any = dict(self.options).get(LOG_FILE)
        logger = logging.getLogger("fluss_spark")
        if path and not any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
            handler = logging.FileHandler(path)
            handler.setLevel(logging.WARNING)
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        return super().streamReader(schema)


__all__ = ["LOG_FILE", "LoggedFlussDataSource"]

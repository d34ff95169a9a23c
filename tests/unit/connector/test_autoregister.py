"""Spark's own lookup of ``pyspark_*`` modules finds the fluss source without register()."""

import importlib
import pkgutil

from pyspark.sql.datasource import DataSource

from fluss_spark.connector.source import FlussDataSource


def test_spark_lookup_finds_the_fluss_source():
    # The same walk Spark's lookup_data_sources worker does when a session first needs one.
    found = {}
    for info in pkgutil.iter_modules():
        if info.name.startswith("pyspark_"):
            mod = importlib.import_module(info.name)
            source = getattr(mod, "DefaultSource", None)
            if isinstance(source, type) and issubclass(source, DataSource):
                found[source.name()] = source
    assert found.get("fluss") is FlussDataSource

"""Source options: case-insensitive keys, clear errors, exactly one table option."""

import pytest

from fluss_spark.connector.options import (SOURCE_OPTIONS, options_table_markdown, parse_options,
                                           parse_timestamp_ms)
from fluss_spark.errors import ConfigError

BASE = {"bootstrap.servers": "localhost:9123", "table": "db.orders"}


def test_defaults():
    o = parse_options(BASE)
    assert o.bootstrap_servers == "localhost:9123"
    assert o.tables == ("db.orders",) and not o.multi_table
    assert o.startup_mode == "full" and o.fail_on_data_loss is True
    assert o.lease_id is None and o.lease_duration_ms == 86_400_000
    assert o.scan_batch_bytes == 4 << 20 and o.max_offsets_per_trigger is None


def test_spark_lowercased_keys_are_accepted():
    o = parse_options({**BASE, "maxoffsetspertrigger": "100", "failondataloss": "false",
                       "maxtriggerdelay": "30s",
                       "scan.kv.snapshot.lease.duration": "1h"})
    assert o.max_offsets_per_trigger == 100
    assert o.fail_on_data_loss is False
    assert o.max_trigger_delay_ms == 30_000
    assert o.lease_duration_ms == 3_600_000


def test_unknown_option_is_named_first_then_the_known_ones():
    with pytest.raises(ConfigError) as e:
        parse_options({**BASE, "maxOffsetPerTrigger": "5"})
    msg = str(e.value)
    assert msg.startswith("unknown option(s) for format('fluss'): 'maxOffsetPerTrigger' "
                          "('maxOffsetPerTrigger' -> did you mean 'maxOffsetsPerTrigger'?). "
                          "Known options: ")
    assert "bootstrap.servers" in msg


@pytest.mark.parametrize("kafka, ours", [("startingOffsets", "'scan.startup.mode'"),
                                         ("startingTimestamp", "'scan.startup.timestamp'"),
                                         ("subscribe", "'tables'"),
                                         ("subscribePattern", "'table.pattern'")])
def test_kafka_habits_get_the_name_this_source_uses(kafka, ours):
    with pytest.raises(ConfigError) as e:
        parse_options({**BASE, kafka: "x"})
    assert f"{kafka!r} is Kafka's; here it is {ours}" in str(e.value).split(". Known")[0]


def test_bootstrap_servers_required():
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        parse_options({"table": "t"})


@pytest.mark.parametrize("extra", [{}, {"tables": "a,b"}, {"table.pattern": "a.*"}])
def test_exactly_one_table_option(extra):
    opts = {"bootstrap.servers": "h:1", **extra}
    if not extra:
        with pytest.raises(ConfigError, match="exactly one of 'table', 'tables'"):
            parse_options(opts)
    else:
        assert parse_options(opts).multi_table
        with pytest.raises(ConfigError, match="exactly one"):
            parse_options({**opts, "table": "x"})


def test_tables_list_and_duplicates():
    assert parse_options({"bootstrap.servers": "h:1", "tables": " a , b "}).tables == ("a", "b")
    with pytest.raises(ConfigError, match="more than once"):
        parse_options({"bootstrap.servers": "h:1", "tables": "a,a"})
    with pytest.raises(ConfigError, match="use 'tables'"):
        parse_options({"bootstrap.servers": "h:1", "table": "a,b"})


def test_bad_pattern():
    with pytest.raises(ConfigError, match="not a valid regex"):
        parse_options({"bootstrap.servers": "h:1", "table.pattern": "("})


def test_path_is_table():
    assert parse_options({"bootstrap.servers": "h:1", "path": "t1"}).tables == ("t1",)


def test_startup_modes():
    assert parse_options({**BASE, "scan.startup.mode": "LATEST"}).startup_mode == "latest"
    with pytest.raises(ConfigError, match="not one of full, earliest, latest, timestamp"):
        parse_options({**BASE, "scan.startup.mode": "newest"})
    with pytest.raises(ConfigError, match="needs option 'scan.startup.timestamp'"):
        parse_options({**BASE, "scan.startup.mode": "timestamp"})
    with pytest.raises(ConfigError, match="only used with"):
        parse_options({**BASE, "scan.startup.timestamp": "5"})
    o = parse_options({**BASE, "scan.startup.mode": "timestamp",
                       "scan.startup.timestamp": "2024-01-02 03:04:05"})
    assert o.startup_timestamp_ms == 1704164645000


def test_timestamp_formats():
    assert parse_timestamp_ms("1700000000000") == 1700000000000
    assert parse_timestamp_ms("1970-01-01 00:00:01") == 1000
    with pytest.raises(ConfigError, match="epoch milliseconds"):
        parse_timestamp_ms("yesterday")


@pytest.mark.parametrize("bad", ["has space", "a/b", "x" * 129, "ü"])
def test_unsafe_lease_id_refused(bad):
    with pytest.raises(ConfigError, match="lease id"):
        parse_options({**BASE, "scan.kv.snapshot.lease.id": bad})


def test_safe_lease_id():
    assert parse_options({**BASE, "scan.kv.snapshot.lease.id": "job-1.a_b"}).lease_id == "job-1.a_b"


def test_numbers_validated():
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger must be at least 1"):
        parse_options({**BASE, "maxoffsetspertrigger": "0"})
    with pytest.raises(ConfigError, match="expected an integer"):
        parse_options({**BASE, "maxoffsetspertrigger": "ten"})
    with pytest.raises(ConfigError, match="must not exceed"):
        parse_options({**BASE, "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "20"})
    assert parse_options({**BASE, "scan.batch.bytes": "64kb"}).scan_batch_bytes == 65536


def test_every_option_documented():
    table = options_table_markdown()
    for o in SOURCE_OPTIONS:
        assert o.doc and f"`{o.key}`" in table


def test_docs_option_table_is_current():
    from pathlib import Path
    docs = Path(__file__).resolve().parents[3] / "docs" / "spark_source.md"
    assert options_table_markdown() in docs.read_text(), \
        "regenerate the table in docs/spark_source.md from options_table_markdown()"


def test_columns_option():
    assert parse_options({"bootstrap.servers": "h:1", "table": "t", "columns": " a, b "}
                         ).columns == ("a", "b")
    assert parse_options({"bootstrap.servers": "h:1", "table": "t"}).columns == ()
    for value, error in ((" , ", "lists no column"), ("a,b,a", "'columns' lists a more than once")):
        with pytest.raises(ConfigError, match=error):
            parse_options({"bootstrap.servers": "h:1", "table": "t", "columns": value})
    with pytest.raises(ConfigError, match="'columns' works with option 'table'"):
        parse_options({"bootstrap.servers": "h:1", "tables": "a,b", "columns": "x"})


@pytest.mark.parametrize("options, needle", [
    ({"scan.startup.mode": "timestamp", "scan.startup.timestamp": str(2**70)}, "year 9999"),
    ({"scan.startup.mode": "timestamp", "scan.startup.timestamp": "-1"}, "outside 0.."),
    ({"scan.kv.snapshot.lease.duration": "99999999999999999999d"}, "longer than the maximum"),
    ({"scan.kv.snapshot.lease.duration": "400d"}, "must be at most"),
])
def test_out_of_range_values_are_one_clear_error(options, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        parse_options({**BASE, **options})
    assert "\n" not in str(err.value)


def test_security_options_are_checked_together():
    base = {"bootstrap.servers": "h:1", "table": "t"}
    ok = parse_options({**base, "client.security.protocol": "SASL",
                        "client.security.sasl.mechanism": "PLAIN",
                        "client.security.sasl.username": "u",
                        "client.security.sasl.password": "pw-secret"})
    assert ok.sasl_username == "u" and "pw-secret" not in repr(ok)
    for extra, error in (({"client.security.protocol": "SASL"}, "needs options"),
                         ({"client.security.sasl.username": "u"}, "go together"),
                         ({"client.security.protocol": "PLAINTEXT",
                           "client.security.sasl.username": "u",
                           "client.security.sasl.password": "p"}, "PLAINTEXT"),
                         ({"client.security.sasl.mechanism": "SCRAM"}, "not one of")):
        with pytest.raises(ConfigError, match=error):
            parse_options({**base, **extra})


def test_tls_options_need_tls_enabled_and_reach_the_cluster(monkeypatch):
    base = {"bootstrap.servers": "h:1", "table": "t"}
    assert not parse_options(base).ssl_enabled
    ok = parse_options({**base, "client.security.ssl.enabled": "true",
                        "client.security.ssl.ca-file": " /etc/fluss/ca.pem ",
                        "client.security.ssl.verify-hostname": "false"})
    assert (ok.ssl_enabled, ok.ssl_ca_file, ok.ssl_verify_hostname) == \
        (True, "/etc/fluss/ca.pem", False)
    for extra, error in (({"client.security.ssl.ca-file": "/ca.pem"},
                          "'client.security.ssl.ca-file' is a TLS setting: set "
                          "'client.security.ssl.enabled' to true"),
                         ({"client.security.ssl.enabled": "yes please"}, "expected true or false"),
                         ({"client.security.ssl.enabled": "true",
                           "client.security.ssl.verify-hostname": "no way"}, "true or false")):
        with pytest.raises(ConfigError, match=error):
            parse_options({**base, **extra})
    from fluss_spark.client import TlsClientConfig, backends
    opened = {}
    monkeypatch.setattr(backends, "open_cluster", lambda servers, **kw: opened.update(kw))
    ok.connect()
    assert opened["tls"] == TlsClientConfig("/etc/fluss/ca.pem", verify_hostname=False)
    parse_options(base).connect()
    assert opened["tls"] is None


def test_tls_picks_the_embedded_engine_and_is_refused_for_apache_fluss():
    from fluss_spark.client import TlsClientConfig
    from fluss_spark.client.backends import open_cluster
    with pytest.raises(ConfigError, match="TLS is not supported for Apache Fluss clusters"):
        open_cluster("h:1", engine="apache-fluss", tls=TlsClientConfig())


# (Option values are stripped first: "id\n" as an option is the lease id "id".)
@pytest.mark.parametrize("lease_id", [".", "..", "a b", "x" * 129, "a/b"])
def test_the_source_refuses_every_lease_id_the_coordinator_refuses(lease_id):
    from fluss_spark.errors import InvalidLeaseId
    from fluss_spark.metadata.layout import check_lease_id as coordinator_check
    with pytest.raises(InvalidLeaseId):
        coordinator_check(lease_id)
    with pytest.raises(ConfigError, match="not allowed"):
        parse_options({"bootstrap.servers": "h:1", "table": "t",
                       "scan.kv.snapshot.lease.id": lease_id})


def test_source_options_default_to_the_declared_defaults():
    import dataclasses
    from fluss_spark.connector.options import STARTUP_MODE, SourceOptions
    parsed = parse_options({"bootstrap.servers": "h:1", "table": "db.t"})
    assert dataclasses.replace(parsed, tables=()) == SourceOptions("h:1")
    assert SourceOptions("h:1").startup_mode == STARTUP_MODE.default == "full"

"""The servers' TLS settings: what ``security.ssl.*`` needs, and one-line errors naming it."""

from __future__ import annotations

import pytest

from fluss_spark.config import parse_server_options
from fluss_spark.errors import ConfigError
from fluss_spark.local.certificates import TlsFiles
from fluss_spark.server.security import Security
from fluss_spark.transport.tls import TlsClientConfig


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> TlsFiles:
    return TlsFiles(tmp_path_factory.mktemp("tls") / "tls").create()


def security(*options: str) -> Security:
    return Security.from_options(parse_server_options(list(options)))


def test_without_tls_nothing_is_loaded():
    sec = security()
    assert sec.tls is None and sec.internal_tls is None


def test_tls_alone_and_with_sasl(files, tmp_path):
    tls = ["security.ssl.enabled=true", f"security.ssl.certificate-file={files.certificate_file}",
           f"security.ssl.key-file={files.key_file}", f"security.ssl.ca-file={files.ca_file}"]
    alone = security(*tls)
    assert alone.tls is not None and not alone.sasl
    assert alone.internal_tls == TlsClientConfig(str(files.ca_file), True)
    assert alone.internal_credentials is None
    users = tmp_path / "users"
    users.write_text("internal:pw\n")
    both = security(*tls, "security.protocol=SASL", f"security.sasl.users-file={users}",
                    "security.ssl.verify-hostname=false")
    assert both.sasl and both.tls is not None
    assert both.internal_tls == TlsClientConfig(str(files.ca_file), False)
    assert both.internal_credentials == ("internal", "pw")


@pytest.mark.parametrize("options, error", [
    (["security.ssl.enabled=true"], "security.ssl.enabled=true needs "
                                    "security.ssl.certificate-file and security.ssl.key-file"),
    (["security.ssl.enabled=maybe"], "security.ssl.enabled: expected true or false"),
    (["security.ssl.enabled=true", "security.ssl.certificate-file=/nope/cert.pem",
      "security.ssl.key-file=/nope/key.pem"], "security.ssl.certificate-file: /nope/cert.pem "
                                              "does not exist"),
])
def test_incomplete_or_wrong_settings_are_one_line_errors(options, error):
    with pytest.raises(ConfigError, match=error) as err:
        security(*options)
    assert "\n" not in str(err.value)


def test_a_missing_ca_file_stops_the_server_at_start(files):
    with pytest.raises(ConfigError, match="the TLS CA file /nope/ca.pem does not exist"):
        security("security.ssl.enabled=true",
                 f"security.ssl.certificate-file={files.certificate_file}",
                 f"security.ssl.key-file={files.key_file}", "security.ssl.ca-file=/nope/ca.pem")

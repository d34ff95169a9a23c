"""A self-signed CA and a server certificate for a local cluster's TLS, made with ``openssl``.

``fluss-spark cluster start --tls`` and the tests use them: the CA signs one certificate that
names the cluster's host (and localhost, 127.0.0.1, ::1), so clients verify hostnames as usual.
The CA's private key is deleted once it signed: nothing else can be issued under it. Every file
is mode 600 in a directory of mode 700.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fluss_spark.errors import ConfigError, FlussError

#: Days the CA and the server certificate are valid.
VALID_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    """Where a local cluster's TLS files are (``<dir>/ca.pem``, ``server.pem``, ``server.key``)."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def certificate_file(self) -> Path:
        return self.directory / "server.pem"

    @property
    def key_file(self) -> Path:
        return self.directory / "server.key"

    def exist(self) -> bool:
        return all(p.exists() for p in (self.ca_file, self.certificate_file, self.key_file))

    def create(self, host: str = "127.0.0.1") -> "TlsFiles":
        """Make the CA and a server certificate for ``host`` unless they exist."""
        if self.exist():
            return self
        openssl = shutil.which("openssl")
        if openssl is None:
            raise ConfigError("TLS for a local cluster needs the openssl command (apt-get install "
                              "openssl), or give security.ssl.* options with your own files")
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        ca_key, csr = self.directory / "ca.key", self.directory / "server.csr"
        ext = self.directory / "server.ext"
        ext.write_text(f"subjectAltName={_alt_names(host)}\nbasicConstraints=CA:FALSE\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n"
                       "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try:
            _run([openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", self.ca_file,
                  "-days", str(VALID_DAYS), "-subj", "/CN=fluss-spark local cluster CA",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            _run([openssl, "req", *ec, "-keyout", self.key_file, "-out", csr,
                  "-subj", f"/CN={host}"])
            _run([openssl, "x509", "-req", "-in", csr, "-CA", self.ca_file, "-CAkey", ca_key,
                  "-CAcreateserial", "-out", self.certificate_file, "-days", str(VALID_DAYS),
                  "-extfile", ext])
        finally:
            for leftover in (ca_key, csr, ext, self.directory / "ca.srl"):
                leftover.unlink(missing_ok=True)
        for path in (self.ca_file, self.certificate_file, self.key_file):
            os.chmod(path, 0o600)
        return self


def _alt_names(host: str) -> str:
    names = {"DNS:localhost", "IP:127.0.0.1", "IP:::1"}
    try:
        names.add(f"IP:{ipaddress.ip_address(host)}")
    except ValueError:
        names.add(f"DNS:{host}")
    return ",".join(sorted(names))


def _run(cmd: list) -> None:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FlussError(f"making the local cluster's TLS certificate failed: openssl "
                         f"{cmd[1]} exited with {done.returncode}: {last}")

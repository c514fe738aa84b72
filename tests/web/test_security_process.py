"""TLS, mTLS and basic auth against the real exporter process, with certificates made in the test.

Each test starts ``python -m exporter --simulate --web-config-file ...`` and talks to it as
Prometheus, curl or an attacker would: over HTTPS with or without a client certificate, with
right and wrong credentials, with plain HTTP on the TLS port, and across a certificate rotation.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509

from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.polling import wait_for
from tests.web.certs import CertificateAuthority, Issued

pytestmark = pytest.mark.e2e

PASSWORD = "scrape-password"
WRONG = "guess-7f3a9c"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
# Refusals as a client sees them: a TLS alert, a reset, or a closed connection.
REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, OSError)


@dataclass(frozen=True)
class Pki:
    ca: CertificateAuthority
    server: Issued
    client: Issued
    stranger: Issued  # a client certificate from a CA the exporter does not trust


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca = CertificateAuthority("exporter test CA")
    other = CertificateAuthority("somebody else's CA")
    return Pki(ca=ca, server=ca.issue("gpu-pod-exporter"),
               client=ca.issue("prometheus", dns=("prometheus.monitoring.svc",), ips=(), client=True),
               stranger=other.issue("prometheus", dns=("prometheus.monitoring.svc",), ips=(), client=True))


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str
    server_serial: int


def client_context(pki: Pki, cert: Issued | None = None, tmp: Path | None = None,
                   maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pki.ca.pem.decode())
    context.maximum_version = maximum
    if cert is not None:
        assert tmp is not None
        cert_path, key_path = cert.write_pair(tmp / "client-side", f"client-{cert.serial}")
        context.load_cert_chain(cert_path, key_path)
    return context


def https_get(port: int, path: str, context: ssl.SSLContext, headers: dict[str, str] | None = None) -> Reply:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        assert isinstance(conn.sock, ssl.SSLSocket)
        der = conn.sock.getpeercert(binary_form=True)
        assert der is not None
        response = conn.getresponse()
        body = response.read().decode("utf-8")
        return Reply(response.status, response.headers, body, x509.load_der_x509_certificate(der).serial_number)
    finally:
        conn.close()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def wait_https(exporter: ExporterProcess, context: ssl.SSLContext, headers: dict[str, str] | None = None) -> Reply:
    def answered() -> Reply | None:
        exporter.assert_running()
        try:
            reply = https_get(exporter.port, "/health", context, headers)
        except REFUSED:
            return None
        return reply if reply.status == 200 else None

    return wait_for(answered, 30, "/health over HTTPS to answer 200")


def install_server_cert(directory: Path, issued: Issued) -> None:
    """Swap in new files (new inodes), as a Secret volume update or cert-manager renewal does."""
    staging = directory / "staging"
    issued.write_pair(staging, "tls")
    (directory / "tls").mkdir(exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        os.replace(staging / name, directory / "tls" / name)


Start = Callable[[str], ExporterProcess]


@pytest.fixture
def exporter_with(tmp_path: Path, pki: Pki) -> Iterator[Start]:
    """Start the exporter with a web config (paths relative to tmp_path, where tls/ and ca.crt live)."""
    with ExitStack() as stack:
        def start(web_config: str) -> ExporterProcess:
            install_server_cert(tmp_path, pki.server)
            pki.ca.write(tmp_path / "ca.crt")
            (tmp_path / "web.yml").write_text(web_config)
            return stack.enter_context(
                running_exporter(["--simulate", "default", "--web-config-file", str(tmp_path / "web.yml")]))

        yield start


TLS = "tls_server_config:\n  cert_file: tls/tls.crt\n  key_file: tls/tls.key\n"


def test_https_serves_metrics_with_the_configured_certificate_and_headers(exporter_with: Start, pki: Pki) -> None:
    exporter = exporter_with(TLS + "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
                             "    Strict-Transport-Security: max-age=31536000\n")
    context = client_context(pki)
    wait_https(exporter, context)
    reply = https_get(exporter.port, "/metrics", context)
    assert reply.status == 200
    assert "DCGM_FI_DEV_GPU_TEMP{" in reply.body
    assert reply.server_serial == pki.server.serial
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert "web config loaded" in exporter.log()


def test_min_version_is_enforced(exporter_with: Start, pki: Pki) -> None:
    exporter = exporter_with(TLS + "  min_version: TLS13\n")
    wait_https(exporter, client_context(pki))
    with pytest.raises(ssl.SSLError):
        https_get(exporter.port, "/metrics", client_context(pki, maximum=ssl.TLSVersion.TLSv1_2))
    assert https_get(exporter.port, "/metrics", client_context(pki)).status == 200


def test_mtls_accepts_only_certificates_from_the_client_ca(exporter_with: Start, pki: Pki,
                                                           tmp_path: Path) -> None:
    exporter = exporter_with(TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    trusted = client_context(pki, pki.client, tmp_path)
    wait_https(exporter, trusted)
    with pytest.raises(REFUSED):
        https_get(exporter.port, "/metrics", client_context(pki))  # no client certificate
    with pytest.raises(REFUSED):
        https_get(exporter.port, "/metrics", client_context(pki, pki.stranger, tmp_path))  # wrong CA
    reply = https_get(exporter.port, "/metrics", trusted)
    assert reply.status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in reply.body
    exporter.assert_running()


def test_client_allowed_sans_narrow_mtls_to_named_clients(exporter_with: Start, pki: Pki,
                                                          tmp_path: Path) -> None:
    other_client = pki.ca.issue("grafana-agent", dns=("agent.monitoring.svc",), ips=(), client=True)
    exporter = exporter_with(TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                             "  client_allowed_sans: [prometheus.monitoring.svc]\n")
    allowed = client_context(pki, pki.client, tmp_path)
    wait_https(exporter, allowed)
    with pytest.raises(REFUSED):
        https_get(exporter.port, "/metrics", client_context(pki, other_client, tmp_path))
    assert https_get(exporter.port, "/metrics", allowed).status == 200


def test_basic_auth_right_wrong_unknown_and_missing_credentials(exporter_with: Start, pki: Pki) -> None:
    exporter = exporter_with(TLS + f"basic_auth_users:\n  prometheus: {HASH}\n")
    context = client_context(pki)
    wait_https(exporter, context, basic("prometheus", PASSWORD))
    # /health turns 200 with the first sample; the renderer publishes its exposition a moment later.
    def sampled() -> Reply | None:
        reply = https_get(exporter.port, "/metrics", context, basic("prometheus", PASSWORD))
        return reply if reply.status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in reply.body else None

    wait_for(sampled, 10, "the first sample's metrics")
    for headers in (basic("prometheus", WRONG), basic("mallory", PASSWORD), {}):
        refused = https_get(exporter.port, "/metrics", context, headers)
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith('Basic realm="gpu-pod-exporter"')
        assert "DCGM" not in refused.body
    assert https_get(exporter.port, "/health", context).status == 401  # every path is protected
    log = exporter.log()
    assert PASSWORD not in log and HASH not in log and WRONG not in log


def test_plain_http_to_the_tls_port_gets_a_400_and_others_keep_being_served(exporter_with: Start,
                                                                            pki: Pki) -> None:
    exporter = exporter_with(TLS)
    context = client_context(pki)
    wait_https(exporter, context)
    plain = exporter.get("/metrics")  # http://
    assert plain.status == 400
    assert "HTTP request to an HTTPS server" in plain.text
    # a client that connects and sends garbage, or nothing, does not disturb the others either
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as junk:
        junk.sendall(b"\x00\x01garbage")
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5):
        pass
    assert https_get(exporter.port, "/metrics", context).status == 200
    exporter.assert_running()


def test_a_rotated_certificate_is_served_without_restart(exporter_with: Start, pki: Pki,
                                                         tmp_path: Path) -> None:
    exporter = exporter_with(TLS)
    context = client_context(pki)
    assert wait_https(exporter, context).server_serial == pki.server.serial
    renewed = pki.ca.issue("gpu-pod-exporter")
    install_server_cert(tmp_path, renewed)

    def new_certificate_served() -> Reply | None:
        reply = https_get(exporter.port, "/metrics", context)
        return reply if reply.server_serial == renewed.serial else None

    reply = wait_for(new_certificate_served, 10, "new connections to see the renewed certificate")
    assert reply.status == 200
    assert exporter.process.poll() is None  # same process, no restart
    assert "web config reloaded" in exporter.log()

"""Server SSL contexts from the web config: real certificates, real handshakes over a socket pair."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from exporter.web.tls import build_server_context, curve_note, peer_san_allowed
from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config
from tests.web.certs import CertificateAuthority, Issued


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("test CA")


@pytest.fixture(scope="module")
def server(ca: CertificateAuthority) -> Issued:
    return ca.issue("exporter")


def write_config(directory: Path, text: str) -> WebConfig:
    path = directory / "web.yml"
    path.write_text(text)
    return load_web_config(str(path))


def client_context(ca: CertificateAuthority, maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.pem.decode())
    context.maximum_version = maximum
    return context


def handshake(server_context: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, Any]:
    """One TLS handshake over a socket pair; what the client saw."""
    server_end, client_end = socket.socketpair()
    server_end.settimeout(10)
    client_end.settimeout(10)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_end, server_side=True) as wrapped:
                wrapped.sendall(b"x")
        except (OSError, ssl.SSLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(client_end, server_hostname="localhost") as wrapped:
            wrapped.recv(1)
            der = wrapped.getpeercert(binary_form=True)
            assert der is not None
            return {"version": wrapped.version(), "cipher": wrapped.cipher(),
                    "serial": x509.load_der_x509_certificate(der).serial_number}
    finally:
        thread.join(10)
        server_end.close()


def test_the_server_presents_the_configured_certificate(tmp_path: Path, ca: CertificateAuthority,
                                                         server: Issued) -> None:
    server.write_pair(tmp_path, "tls")
    config = write_config(tmp_path, "tls_server_config: {cert_file: tls.crt, key_file: tls.key}\n")
    context = build_server_context(config)
    assert context is not None
    seen = handshake(context, client_context(ca))
    assert seen["serial"] == server.serial
    assert seen["version"] == "TLSv1.3"


def test_no_tls_section_means_no_context(tmp_path: Path) -> None:
    assert build_server_context(write_config(tmp_path, "")) is None


def test_inline_certificate_and_key_work_without_files(tmp_path: Path, ca: CertificateAuthority,
                                                       server: Issued) -> None:
    indent = "\n    "
    config = write_config(tmp_path, "tls_server_config:\n"
                          f"  cert: |{indent}{indent.join(server.cert_pem.decode().splitlines())}\n"
                          f"  key: |{indent}{indent.join(server.key_pem.decode().splitlines())}\n")
    context = build_server_context(config)
    assert context is not None
    assert handshake(context, client_context(ca))["serial"] == server.serial


def test_cipher_suites_apply_to_tls12(tmp_path: Path, ca: CertificateAuthority, server: Issued) -> None:
    server.write_pair(tmp_path, "tls")
    config = write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                          "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n")
    context = build_server_context(config)
    assert context is not None
    seen = handshake(context, client_context(ca, maximum=ssl.TLSVersion.TLSv1_2))
    assert seen["version"] == "TLSv1.2"
    assert seen["cipher"][0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


def test_min_version_refuses_older_clients(tmp_path: Path, ca: CertificateAuthority, server: Issued) -> None:
    server.write_pair(tmp_path, "tls")
    config = write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                          "  min_version: TLS13\n")
    context = build_server_context(config)
    assert context is not None
    with pytest.raises(ssl.SSLError):
        handshake(context, client_context(ca, maximum=ssl.TLSVersion.TLSv1_2))


@pytest.mark.parametrize(("files", "yaml_text", "expected"), [
    ({}, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
     "web.yml:2: tls_server_config.cert_file: cannot read {dir}/tls.crt: No such file or directory"),
    ({"tls.crt": "server"}, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
     "web.yml:3: tls_server_config.key_file: cannot read {dir}/tls.key: No such file or directory"),
    ({"tls.crt": "garbage", "tls.key": "server-key"}, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
     "web.yml:2: tls_server_config.cert_file: no PEM certificate"),
    ({"tls.crt": "server", "tls.key": "other-key"}, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
     "web.yml:3: tls_server_config.key_file: the private key does not match the certificate"),
    ({"tls.crt": "server", "tls.key": "server-key", "ca.crt": "garbage"},
     "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: ca.crt\n",
     "web.yml:5: tls_server_config.client_ca_file: no PEM certificate"),
])
def test_bad_certificate_files_name_the_key_and_the_file(tmp_path: Path, server: Issued, files: dict[str, str],
                                                         yaml_text: str, expected: str) -> None:
    other = CertificateAuthority("other").issue("other")
    contents = {"server": server.cert_pem, "server-key": server.key_pem, "other-key": other.key_pem,
                "garbage": b"not a certificate\n"}
    for name, what in files.items():
        (tmp_path / name).write_bytes(contents[what])
    config = write_config(tmp_path, yaml_text)
    with pytest.raises(WebConfigError) as caught:
        build_server_context(config)
    message = str(caught.value)
    assert message.startswith(str(tmp_path))
    assert expected.format(dir=tmp_path) in message, message


def test_the_private_key_never_appears_in_an_error(tmp_path: Path, server: Issued) -> None:
    other = CertificateAuthority("other").issue("other")
    (tmp_path / "tls.crt").write_bytes(server.cert_pem)
    key_body = other.key_pem.decode().splitlines()[1]
    config = write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key: |\n    "
                          + "\n    ".join(other.key_pem.decode().splitlines()) + "\n")
    with pytest.raises(WebConfigError) as caught:
        build_server_context(config)
    assert "does not match" in str(caught.value)
    assert key_body not in str(caught.value)


def test_several_curves_are_noted_because_python_can_pin_only_one(tmp_path: Path, server: Issued) -> None:
    server.write_pair(tmp_path, "tls")
    # Not X25519: Debian 12's Python 3.11.2 cannot pin it (set_ecdh_curve: unknown group), so a web config
    # naming it is refused there, rightly, with file, line and key.
    config = write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                          "  curve_preferences: [CurveP384, CurveP256]\n")
    assert config.tls is not None
    assert build_server_context(config) is not None
    assert curve_note(config.tls) == ("curve_preferences: Python's ssl can restrict the key exchange to one curve "
                                      "only; using CurveP384, not offering CurveP256")


def test_client_san_matching_is_exact() -> None:
    peer = {"subjectAltName": (("DNS", "prometheus.monitoring.svc"), ("IP Address", "10.0.0.7"),
                               ("URI", "spiffe://cluster/ns/monitoring/sa/prometheus"))}
    assert peer_san_allowed(peer, ())
    assert peer_san_allowed(peer, ("prometheus.monitoring.svc",))
    assert peer_san_allowed(peer, ("spiffe://cluster/ns/monitoring/sa/prometheus",))
    assert peer_san_allowed(peer, ("10.0.0.7",))
    assert not peer_san_allowed(peer, ("prometheus",))
    assert not peer_san_allowed(peer, ("*.monitoring.svc",))
    assert not peer_san_allowed(None, ("prometheus.monitoring.svc",))
    assert peer_san_allowed({"subjectAltName": (("IP Address", "2001:DB8:0:0:0:0:0:1\n"),)}, ("2001:db8::1",))

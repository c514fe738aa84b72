"""The web config kept current while running: rotation, broken updates, checks at most once a second."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

import exporter.web.security as security_module
from exporter.web.auth import REALM
from exporter.web.security import FileWebSecurity, load_web_security
from exporter.web.server import WebSecurity
from exporter.web.webconfig import WebConfigError
from tests.web.certs import CertificateAuthority, Issued
from tests.web.test_auth import header
from tests.web.test_tls import handshake

TLS_CONFIG = "tls_server_config:\n  cert_file: tls/tls.crt\n  key_file: tls/tls.key\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("rotation CA")


@pytest.fixture
def logs() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("gpu_pod_exporter.web")
    handler = Keep(level=logging.DEBUG)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(previous)


def install(directory: Path, issued: Issued) -> None:
    """Replace the certificate the way a Kubernetes Secret update does: new files, new inodes."""
    staging = directory / "staging"
    issued.write_pair(staging, "tls")
    (directory / "tls").mkdir(exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        os.replace(staging / name, directory / "tls" / name)


def serial_served(security: FileWebSecurity, ca: CertificateAuthority) -> int:
    context = security.ssl_context()
    assert context is not None
    client = ssl.create_default_context(cadata=ca.pem.decode())
    return int(handshake(context, client)["serial"])


def make(tmp_path: Path, ca: CertificateAuthority, text: str = TLS_CONFIG) -> tuple[FileWebSecurity, Clock, Issued]:
    first = ca.issue("exporter-1")
    install(tmp_path, first)
    (tmp_path / "web.yml").write_text(text)
    clock = Clock()
    return FileWebSecurity(str(tmp_path / "web.yml"), clock=clock), clock, first


def test_a_rotated_certificate_is_served_to_new_connections_without_restart(tmp_path: Path,
                                                                           ca: CertificateAuthority) -> None:
    security, clock, first = make(tmp_path, ca)
    assert serial_served(security, ca) == first.serial
    second = ca.issue("exporter-2")
    install(tmp_path, second)
    assert serial_served(security, ca) == first.serial  # checked at most once per second
    clock.now += 1.0
    assert serial_served(security, ca) == second.serial
    assert security.reloads == 1


def test_files_are_checked_at_most_once_per_second(tmp_path: Path, ca: CertificateAuthority,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    security, clock, _ = make(tmp_path, ca)
    checks = []
    real = security_module.fingerprint
    monkeypatch.setattr(security_module, "fingerprint", lambda paths: checks.append(paths) or real(paths))
    for _ in range(50):
        security.ssl_context()
    assert checks == []
    clock.now += 1.0
    for _ in range(50):
        security.ssl_context()
    assert len(checks) == 1


def test_a_broken_update_keeps_the_old_certificate_and_is_logged_once(tmp_path: Path, ca: CertificateAuthority,
                                                                      logs: list[logging.LogRecord]) -> None:
    security, clock, first = make(tmp_path, ca)
    half_written = ca.issue("exporter-2")
    (tmp_path / "tls" / "tls.crt").unlink()
    (tmp_path / "tls" / "tls.crt").write_bytes(half_written.cert_pem)  # the key is still the old one
    for _ in range(3):
        clock.now += 1.0
        assert serial_served(security, ca) == first.serial
    errors = [record for record in logs if record.levelno == logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage() + str(getattr(errors[0], "fields", ""))
    assert "still serving with the previous settings" in message
    assert "tls_server_config.key_file: the private key does not match the certificate" in message
    # the rotation completes: the next check picks it up
    install(tmp_path, half_written)
    clock.now += 1.0
    assert serial_served(security, ca) == half_written.serial
    assert any(record.getMessage() == "web config reloaded" for record in logs)


def test_a_broken_web_config_edit_keeps_the_running_settings(tmp_path: Path, ca: CertificateAuthority) -> None:
    security, clock, first = make(tmp_path, ca)
    (tmp_path / "web.yml").write_text(TLS_CONFIG + "  min_versoin: TLS13\n")
    clock.now += 1.0
    assert serial_served(security, ca) == first.serial
    assert security.reloads == 0


def test_tls_cannot_be_switched_off_by_a_reload(tmp_path: Path, ca: CertificateAuthority,
                                                logs: list[logging.LogRecord]) -> None:
    security, clock, _ = make(tmp_path, ca)
    (tmp_path / "web.yml").write_text("")
    clock.now += 1.0
    assert security.ssl_context() is not None
    assert any("needs a restart" in str(getattr(record, "fields", "")) for record in logs)


def test_changed_users_and_headers_apply_on_reload(tmp_path: Path, ca: CertificateAuthority) -> None:
    old = bcrypt.hashpw(b"old", bcrypt.gensalt(4)).decode()
    new = bcrypt.hashpw(b"new", bcrypt.gensalt(4)).decode()
    security, clock, _ = make(tmp_path, ca, f"basic_auth_users:\n  prometheus: {old}\n")
    assert security.authenticate(header("prometheus", "old")) is None
    assert security.headers() == {}
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: {new}\n"
                                      "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    clock.now += 1.0
    assert security.ssl_context() is None
    assert security.authenticate(header("prometheus", "old")) == REALM
    assert security.authenticate(header("prometheus", "new")) is None
    assert security.headers() == {"X-Frame-Options": "deny"}


def test_rate_limit_refuses_once_the_burst_is_spent(tmp_path: Path, ca: CertificateAuthority) -> None:
    security, _, _ = make(tmp_path, ca, "rate_limit: {interval: 1h, burst: 2}\n")
    assert [security.allow_request() for _ in range(3)] == [True, True, False]


def test_no_web_config_means_plain_http_open_to_all() -> None:
    plain = load_web_security("")
    assert type(plain) is WebSecurity
    assert plain.ssl_context() is None
    assert plain.authenticate({}) is None


def test_a_bad_web_config_at_start_raises_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text(TLS_CONFIG)
    with pytest.raises(WebConfigError, match=r"web\.yml:2: tls_server_config\.cert_file: cannot read"):
        load_web_security(str(tmp_path / "web.yml"))


def test_start_up_notes_warn_about_basic_auth_without_tls(tmp_path: Path, logs: list[logging.LogRecord]) -> None:
    hashed = bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  u: {hashed}\n")
    FileWebSecurity(str(tmp_path / "web.yml"))
    warnings = [record.getMessage() for record in logs if record.levelno == logging.WARNING]
    assert any("clear text" in message for message in warnings)
    assert not any(hashed in record.getMessage() + str(getattr(record, "fields", "")) for record in logs)

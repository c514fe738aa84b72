"""The web config file as users write it: every toolkit key accepted, every mistake one clear line."""

from __future__ import annotations

import base64
import socket
import ssl
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter.cli import main
from exporter.config import EXIT_CONFIG_ERROR
from exporter.web.webconfig import WebConfigError, load_web_config, parse_web_config
from tests.support.ports import free_port

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


def parse(text: str) -> object:
    return parse_web_config(text, "/etc/gpu-pod-exporter/web.yml")


def error_of(text: str) -> str:
    with pytest.raises(WebConfigError) as caught:
        parse_web_config(text, "/etc/gpu-pod-exporter/web.yml")
    return str(caught.value)


def test_every_exporter_toolkit_key_is_accepted_and_read() -> None:
    config = parse_web_config(f"""\
tls_server_config:
  cert_file: tls/tls.crt
  key_file: /abs/tls.key
  client_ca_file: ca.crt
  client_auth_type: RequireAndVerifyClientCert
  client_allowed_sans: [prometheus.monitoring.svc, 10.0.0.7]
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [CurveP384]
http_server_config:
  http2: false
  headers:
    Content-Security-Policy: "default-src 'none'"
    X-Frame-Options: sameorigin
    X-Content-Type-Options: nosniff
    X-XSS-Protection: "1; mode=block"
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: {HASH}
rate_limit:
  interval: 100ms
  burst: 5
""", "/etc/gpu-pod-exporter/web.yml")
    tls = config.tls
    assert tls is not None
    assert tls.cert_file == "/etc/gpu-pod-exporter/tls/tls.crt"  # relative to the config's folder
    assert tls.key_file == "/abs/tls.key"
    assert tls.client_ca_file == "/etc/gpu-pod-exporter/ca.crt"
    assert tls.client_auth_type == "RequireAndVerifyClientCert"
    assert tls.client_allowed_sans == ("prometheus.monitoring.svc", "10.0.0.7")
    assert tls.min_version == tls.max_version == ssl.TLSVersion.TLSv1_3
    assert tls.cipher_suites == ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256")
    assert tls.prefer_server_cipher_suites is False
    assert tls.curve_preferences == ("CurveP384",)
    assert config.http2 is False
    assert config.headers["X-Frame-Options"] == "sameorigin"
    assert len(config.headers) == 5
    assert dict(config.basic_auth_users) == {"prometheus": HASH}
    assert config.rate_limit is not None
    assert (config.rate_limit.interval_s, config.rate_limit.burst) == (0.1, 5)


def test_an_empty_file_means_plain_http_without_authentication() -> None:
    config = parse_web_config("", "web.yml")
    assert config.tls is None and not config.basic_auth_users and not config.headers


def test_tls_defaults_follow_the_toolkit() -> None:
    config = parse_web_config("tls_server_config: {cert_file: a.crt, key_file: a.key}\n", "/x/web.yml")
    assert config.tls is not None
    assert config.tls.min_version == ssl.TLSVersion.TLSv1_2
    assert config.tls.max_version == ssl.TLSVersion.TLSv1_3
    assert config.tls.client_auth_type == "NoClientCert"
    assert config.tls.prefer_server_cipher_suites is True


@pytest.mark.parametrize(("text", "expected"), [
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_flie: c\n",
     "web.yml:4: tls_server_config.cert_flie: unknown key"),
    ("basic_auth_user:\n  a: b\n", "web.yml:1: basic_auth_user: unknown key"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n",
     "web.yml:4: tls_server_config.min_version: invalid value 'TLS14': expected one of TLS10, TLS11, TLS12, TLS13"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
     "web.yml:4: tls_server_config.min_version: min_version is newer than max_version"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireClientCert\n",
     "web.yml:4: tls_server_config.client_auth_type: invalid value 'RequireClientCert'"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
     "web.yml:4: tls_server_config.client_auth_type: RequireAndVerifyClientCert needs client_ca_file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: ca.crt\n",
     "web.yml:4: tls_server_config.client_ca_file: a client CA is set but client_auth_type is NoClientCert"),
    ("tls_server_config:\n  cert_file: a\n", "web.yml:1: tls_server_config: missing key_file"),
    ("tls_server_config:\n  key_file: a\n", "web.yml:1: tls_server_config: missing cert_file"),
    ("tls_server_config:\n  cert_file: a\n  cert: inline\n  key_file: b\n",
     "web.yml:3: tls_server_config.cert: give either cert or cert_file, not both"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites:\n"
     "    - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n    - TLS_MADE_UP\n",
     "web.yml:6: tls_server_config.cipher_suites[1]: unknown cipher suite 'TLS_MADE_UP'"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
     "web.yml:4: tls_server_config.cipher_suites[0]: cipher suite TLS_RSA_WITH_RC4_128_SHA (RC4-SHA) is not "
     "available in OpenSSL"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [P256]\n",
     "web.yml:4: tls_server_config.curve_preferences[0]: unknown curve 'P256' (known: CurveP256"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: VerifyClientCertIfGiven\n"
     "  client_ca_file: ca.crt\n  client_allowed_sans: [a]\n",
     "web.yml:6: tls_server_config.client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  prefer_server_cipher_suites: maybe\n",
     "web.yml:4: tls_server_config.prefer_server_cipher_suites: expected true or false"),
    ("http_server_config:\n  headers:\n    Server: nginx\n",
     "web.yml:3: http_server_config.headers.Server: header 'Server' is not allowed (allowed: Content-Security-Policy"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "web.yml:3: http_server_config.headers.X-Frame-Options: invalid value 'allow': expected one of deny, sameorigin"),
    ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
     "web.yml:3: http_server_config.headers.X-Content-Type-Options: invalid value 'sniff': expected one of nosniff"),
    ("http_server_config:\n  http3: true\n", "web.yml:2: http_server_config.http3: unknown key"),
    ("basic_auth_users:\n  prometheus: hunter2\n",
     "web.yml:2: basic_auth_users.prometheus: not a bcrypt hash"),
    ("basic_auth_users:\n  a: x\n  a: y\n", "web.yml:3: basic_auth_users.a: duplicate key"),
    ("basic_auth_users: [prometheus]\n", "web.yml:1: basic_auth_users: expected a mapping"),
    ("rate_limit:\n  interval: 1 second\n  burst: 2\n",
     "web.yml:2: rate_limit.interval: invalid duration '1 second'"),
    ("rate_limit:\n  interval: 1s\n", "web.yml:1: rate_limit: burst must be at least 1 when interval is set"),
    ("tls_server_config:\n  cert_file: a\n   key_file: b\n", "web.yml:3: yaml: not valid YAML: mapping values"),
    ("- just\n- a list\n", "web.yml:1: web config: expected a mapping"),
])
def test_each_mistake_is_one_line_naming_file_line_and_key(text: str, expected: str) -> None:
    message = error_of(text)
    assert message.startswith("/etc/gpu-pod-exporter/") and expected in message, message
    assert "\n" not in message


def test_a_web_config_error_is_a_config_error_so_the_cli_exits_2(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: hunter2\n")
    port = free_port()
    assert main(["--address", f"127.0.0.1:{port}", "--web-config-file", str(web)]) == EXIT_CONFIG_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()  # one line, no traceback, the password not echoed
    assert line.startswith(f"gpu-pod-exporter: error: {web}:2: basic_auth_users.prometheus: not a bcrypt hash")
    assert "hunter2" not in line
    with pytest.raises(ConnectionRefusedError):  # nothing was served without the configured protection
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_plain_password_in_basic_auth_users_is_not_echoed() -> None:
    message = error_of("basic_auth_users:\n  prometheus: correct-horse-battery\n")
    assert "correct-horse-battery" not in message


def test_htpasswd_style_hashes_are_accepted() -> None:
    for prefix in ("$2y$", "$2a$", "$2b$"):
        config = parse_web_config(f"basic_auth_users:\n  u: '{prefix}{HASH[4:]}'\n", "web.yml")
        assert config.basic_auth_users["u"].startswith(prefix)


def test_headers_are_matched_case_insensitively_and_blank_means_unset() -> None:
    config = parse_web_config("http_server_config:\n  headers:\n    x-frame-options: DENY\n"
                              "    Content-Security-Policy: ''\n", "web.yml")
    assert dict(config.headers) == {"X-Frame-Options": "DENY"}


def test_rate_limit_interval_zero_disables_it() -> None:
    assert parse_web_config("rate_limit: {interval: 0, burst: 0}\n", "web.yml").rate_limit is None


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match=r"missing\.yml: web-config-file: cannot read: No such file"):
        load_web_config(str(tmp_path / "missing.yml"))


def test_the_error_location_of_later_checks_points_at_the_key(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("# comment\ntls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
    config = load_web_config(str(path))
    assert config.where("tls_server_config.key_file") == f"{path}:4"
    assert config.where("tls_server_config.cert_file") == f"{path}:3"
    assert config.where("tls_server_config.client_ca_file") == f"{path}:2"  # falls back to the parent


def test_the_web_config_the_helm_chart_writes_is_accepted() -> None:
    """The chart (web-config-secret.yaml) and this parser must agree on the format."""
    from tests.deploy.chart_support import CI_VALUES, load_ci_values, render  # noqa: PLC0415 - needs helm

    checked = 0
    for values_file in CI_VALUES:
        rendered = render(load_ci_values(values_file))
        secrets = [obj for obj in rendered.all("Secret") if obj["metadata"]["name"].endswith("-web-config")]
        for secret in secrets:
            text = base64.b64decode(secret["data"]["web-config.yml"]).decode()
            config = parse_web_config(text, f"{values_file.name}:web-config.yml")
            assert config.tls is not None or config.basic_auth_users, yaml.safe_load(text)
            checked += 1
    assert checked >= 2  # tls-basic-auth and mtls write one each

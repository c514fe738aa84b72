"""The web config: any YAML yields a WebConfig or one WebConfigError line, never quoting a secret."""

from __future__ import annotations

from hypothesis import given

from exporter.web.webconfig import WebConfig, WebConfigError, parse_web_config
from tests.fuzz.inputs import HOSTILE_YAML, assert_user_error, within, yaml_texts

KEYS = ["tls_server_config", "http_server_config", "basic_auth_users", "rate_limit", "headers", "cert_file",
        "key_file", "client_auth_type", "min_version", "interval", "burst", "Content-Security-Policy"]


def parse(text: str) -> WebConfig | WebConfigError:
    try:
        return within(10, lambda: parse_web_config(text, "/etc/web.yml"))
    except WebConfigError as exc:
        return exc


@given(yaml_texts(KEYS))
def test_any_web_config_gives_a_config_or_one_line(text: str) -> None:
    result = parse(text)
    if isinstance(result, WebConfigError):
        assert_user_error(str(result))
        assert str(result).startswith("/etc/web.yml")


def test_hostile_documents_are_one_line_errors_that_quote_nothing() -> None:
    for text in HOSTILE_YAML:
        result = parse(text)
        assert isinstance(result, WebConfigError), text[:40]
        assert_user_error(str(result))
    secret_tag = parse("basic_auth_users:\n  u: !MyS3cretPassw0rd x\n")
    assert isinstance(secret_tag, WebConfigError) and "tag" in str(secret_tag)


def test_header_values_are_checked_as_http_carries_them() -> None:
    result = parse("http_server_config:\n  headers:\n    Content-Security-Policy: \u201cdefault-src\u201d\n")
    assert isinstance(result, WebConfigError) and "U+201C" in str(result) and ":3:" in str(result)

"""Transactional reload: whatever the edited web config holds, scrapes go on with the previous one."""

from __future__ import annotations

import logging
from pathlib import Path

import bcrypt
import pytest

import exporter.web.security as security_module
from exporter.web.auth import REALM
from exporter.web.security import FileWebSecurity
from tests.web.test_auth import header
from tests.web.test_security import Clock, logs  # noqa: F401 - the fixture

HASH = bcrypt.hashpw(b"pass", bcrypt.gensalt(4)).decode()
GOOD = f"basic_auth_users:\n  prometheus: {HASH}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"


@pytest.mark.parametrize("broken", [
    "basic_auth_users:\n  prometheus: !!python/object:os.system x\n",
    "basic_auth_users: " + "[" * 10_000 + "\n",
    "rate_limit:\n  interval: 1s\n  burst: " + "9" * 5_000 + "\n",
    "http_server_config:\n  headers:\n    Content-Security-Policy: \u201cdefault-src 'self'\u201d\n",
    "basic_auth_users: *anchor\n",
    "\x00\x01 not yaml",
])
def test_a_broken_edit_keeps_the_previous_config_and_logs_one_line(tmp_path: Path, broken: str,
                                                                     logs: list[logging.LogRecord]) -> None:  # noqa: F811
    path = tmp_path / "web.yml"
    path.write_text(GOOD)
    clock = Clock()
    security = FileWebSecurity(str(path), clock=clock)
    path.write_text(broken)
    for _ in range(3):  # checked three times: the same broken state is reported once
        clock.now += 1.0
        security.maybe_reload()
    assert security.authenticate(header("prometheus", "pass")) is None
    assert security.authenticate(header("prometheus", "nope")) == REALM
    assert security.headers() == {"X-Frame-Options": "deny"}
    rejected = [record for record in logs if "not applied" in record.getMessage()]
    assert len(rejected) == 1
    error = rejected[0].fields["error"]  # type: ignore[attr-defined]
    assert "\n" not in error and str(path) in error and len(error) < 400
    path.write_text(GOOD.replace("deny", "sameorigin"))
    clock.now += 1.0
    security.maybe_reload()
    assert security.headers() == {"X-Frame-Options": "sameorigin"} and security.reloads == 1


def test_any_exception_while_loading_keeps_the_previous_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               logs: list[logging.LogRecord]) -> None:  # noqa: F811
    path = tmp_path / "web.yml"
    path.write_text(GOOD)
    clock = Clock()
    security = FileWebSecurity(str(path), clock=clock)

    def bug(*_args: object) -> None:
        raise ZeroDivisionError("a bug in the loader")

    monkeypatch.setattr(security_module, "build_server_context", bug)
    path.write_text(GOOD + "rate_limit:\n  interval: 1s\n  burst: 5\n")
    clock.now += 1.0
    security.maybe_reload()
    assert security.config.rate_limit is None and security.reloads == 0
    [line] = [record for record in logs if "not applied" in record.getMessage()]
    assert "ZeroDivisionError" in line.fields["error"]  # type: ignore[attr-defined]

"""The test environment sees only what the project installs.

A green run on a machine whose base interpreter happens to hold pytest, yaml or grpc proves nothing
about a fresh machine: scripts/venv.sh creates the environments without --system-site-packages, and
this test fails if the interpreter running the suite can import from anywhere else.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path


def pyvenv_settings(prefix: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in (prefix / "pyvenv.cfg").read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip().lower()] = value.strip()
    return settings


def test_the_suite_runs_in_a_virtual_environment_without_system_site_packages() -> None:
    prefix = Path(sys.prefix)
    assert prefix != Path(sys.base_prefix), "run the tests with ./scripts/test (it makes .venv)"
    assert pyvenv_settings(prefix)["include-system-site-packages"] == "false"


def test_nothing_is_importable_from_the_base_interpreters_site_packages() -> None:
    base = {Path(path) for path in site.getsitepackages([sys.base_prefix])}
    base.add(Path(site.getusersitepackages()))
    leaked = [path for path in sys.path if path and any(Path(path).is_relative_to(b) for b in base)]
    assert leaked == []
    assert not site.ENABLE_USER_SITE  # a venv never adds ~/.local

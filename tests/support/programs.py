"""External programs and tools the tests use: fail under CI when missing, skip locally with a reason."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest


def require_program(name: str, package: str = "prometheus") -> str:
    """The executable's path; skips the calling test with the reason, or fails it when CI=true.

    Why fail under CI: a skipped rule or Prometheus suite would let broken alerts and dashboards land.
    ``CI`` is compared case-insensitively (CI=True must not skip silently).
    """
    path = shutil.which(name)
    if path is None:
        _missing(f"{name} is not installed (Debian: apt-get install {package}; ./scripts/test does it)")
    return path


def require_file(path: Path, how: str) -> Path:
    """``path`` when it exists (a tool installed outside the repository, e.g. axe-core from npm); skips
    the calling test, or fails it when CI=true, with ``how`` to install it."""
    if not path.is_file():
        _missing(f"{path} is missing: {how}")
    return path


def _missing(message: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI=true requires it")
    pytest.skip(message)

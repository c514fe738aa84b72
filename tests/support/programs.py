"""External programs the tests use: fail under CI when missing, skip locally with a reason."""

from __future__ import annotations

import os
import shutil

import pytest


def require_program(name: str, package: str = "prometheus") -> str:
    """The executable's path; skips the calling test with the reason, or fails it when CI=true.

    Why fail under CI: a skipped rule or Prometheus suite would let broken alerts and dashboards land.
    ``CI`` is compared case-insensitively (CI=True must not skip silently).
    """
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian: apt-get install {package}; ./scripts/test does it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI=true requires it")
        pytest.skip(message)
    return path

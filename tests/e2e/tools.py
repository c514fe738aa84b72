"""External programs the end-to-end tests use: fail under CI when missing, skip locally with a reason."""

from __future__ import annotations

import os
import shutil

import pytest


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian package 'prometheus'); ./scripts/test installs it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path

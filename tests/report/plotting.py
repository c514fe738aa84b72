"""matplotlib (the HTML report's plots) and pyarrow (the Parquet export) for the tests that need them:
skip locally, fail under CI when missing.

Why fail under CI: ``./scripts/test`` installs the ``report`` extra; a skipped HTML test there
would hide a broken install exactly where it must be caught.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is not None:
        return
    message = "matplotlib is not installed (pip install -e '.[report]'; ./scripts/test installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI=true requires it")
    pytest.skip(message)


def require_pyarrow() -> None:
    if importlib.util.find_spec("pyarrow") is not None:
        return
    message = "pyarrow is not installed (pip install -e '.[report]'; ./scripts/test installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI=true requires it")
    pytest.skip(message)

"""Fixtures shared by the Kubernetes tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory: unix socket paths are limited to 107 bytes, pytest's tmp_path is long."""
    path = Path(tempfile.mkdtemp(prefix="gpe-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)

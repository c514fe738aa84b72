"""Fixtures shared by the Kubernetes tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attribution_modes import MODE_IDS, MODES


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory: unix socket paths are limited to 107 bytes, pytest's tmp_path is long."""
    path = Path(tempfile.mkdtemp(prefix="gpe-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=MODES, ids=MODE_IDS)
def process_attribution(request: pytest.FixtureRequest) -> bool:
    """Both Kubernetes modes: the default (off, as installed) and process attribution on. A test or
    fixture asking for it runs twice; one that needs a single mode parametrizes the name itself."""
    return bool(request.param)

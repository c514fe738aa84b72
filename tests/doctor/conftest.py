"""Every doctor test starts from a clean environment: no exporter variable leaks in from the shell or CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.config import OPTIONS

EXPORTER_VARIABLES = (*(option.env for option in OPTIONS if option.env), "DCGM_EXPORTER_CONFIG_FILE", "NO_COLOR")


def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in EXPORTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    clean_environment(monkeypatch)
    yield

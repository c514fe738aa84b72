"""Helpers shared by the platform tests: polling for a state (never sleeping for time to pass)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from devcluster.api import Api, ApiError


def poll(what: str, check: Callable[[], Any], deadline_s: float = 120.0) -> Any:
    """The first truthy answer of ``check``; fails the test with ``what`` after a generous deadline."""
    end = time.monotonic() + deadline_s
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > end:
            pytest.fail(f"not reached within {deadline_s:.0f} s: {what}")
        time.sleep(0.2)


def exists(api: Api, path: str) -> bool:
    """Whether GET ``path`` finds the object (404: no)."""
    try:
        api.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def ensure_namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> None:
    api.apply_create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name, "labels": labels or {}}})

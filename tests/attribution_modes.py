"""The two Kubernetes modes every attribution test runs in: the default (what a plain install
serves) and process attribution on (``--kubernetes-process-attribution``, the chart's
``processAttribution.enabled``).

In the default mode a user sees every allocated GPU with its pod, namespace, container and team,
and ``DCGM_EXP_GPU_ALLOCATED`` 1, but none of the families that need NVML's process lists and the
host's ``/proc``; with process attribution on, those too. Tests take ``process_attribution`` from
``attribution_modes`` (a parametrization, so one test body checks both; in tests/kube a fixture
of that name does the same for every test and fixture that asks for it) and ask
``process_families`` for the names that must be absent by default.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

# Families served only when process attribution (or per-process metrics) is on.
PROCESS_FAMILIES = frozenset({
    "DCGM_EXP_CONTAINER_FB_USED", "DCGM_EXP_UNATTRIBUTED_FB_USED", "DCGM_EXP_PROCESS_FB_USED",
    "DCGM_EXP_CONTAINER_FB_USED_PEAK", "DCGM_EXP_CONTAINER_SM_UTIL_PEAK",
    *(f"DCGM_EXP_{owner}_{engine}_UTIL" for owner in ("CONTAINER", "UNATTRIBUTED")
      for engine in ("SM", "MEM", "ENC", "DEC")),
})

MODES = (False, True)
MODE_IDS = ("default-mode", "process-attribution")
attribution_modes = pytest.mark.parametrize("process_attribution", MODES, ids=MODE_IDS)


def process_families(names: Iterable[str]) -> set[str]:
    """Which of ``names`` (metric names a user sees) need process attribution."""
    return set(names) & PROCESS_FAMILIES


def served_names(exposition: str) -> set[str]:
    """The metric names with at least one sample in a text exposition."""
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in exposition.splitlines()
            if line and not line.startswith("#")}

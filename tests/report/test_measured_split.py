"""The report says which split of shared GPUs' busy time it used: by measured per-container use where
the exporters measure it (issue #22), by allocation share elsewhere. The split itself, end to end on
a real Prometheus, is tested in tests/e2e/test_shared_gpus.py; the rules in
deploy/rules/tests/cost-report-rules.test.yaml."""

from __future__ import annotations

from exporter.report.sources import (
    BUSY_BY_ALLOCATION,
    BUSY_MEASURED,
    FRACTION,
    MEASURED_USE_SHARE,
    SPLITS,
    Presence,
    splits,
)
from tests.support.paths import REPO_ROOT

RECORDING_RULES = REPO_ROOT / "deploy" / "rules" / "gpu-pod-exporter-recording.yaml"
POINTS = 20
HOUR = 3600.0


def presence(allocated: set[str], measured: set[str]) -> Presence:
    return Presence({FRACTION.series: frozenset(allocated), MEASURED_USE_SHARE: frozenset(measured)})


def test_the_report_says_which_busy_split_each_cluster_used() -> None:
    assert splits(presence({"east", "west"}, set())) == SPLITS
    assert SPLITS["busy"].startswith(BUSY_BY_ALLOCATION) and "--kubernetes-process-attribution" in SPLITS["busy"]
    assert splits(presence({"east", "west"}, {"east", "west"}))["busy"] == BUSY_MEASURED
    mixed = splits(presence({"east", "west"}, {"west"}))["busy"]
    assert mixed == f"{BUSY_MEASURED} (in cluster west); {BUSY_BY_ALLOCATION} (in cluster east, which measure none)"
    assert splits(presence({""}, {""}))["busy"] == BUSY_MEASURED  # one Prometheus without a cluster label

"""``--mig-chip-series``: a MIG GPU's chip-wide readings on every GPU instance with its pod (default,
as dcgm-exporter), or once per GPU (``once``), on a simulated MIG node with pods.

``tests/fixtures/mig-pods.yaml``: GPU 0 is split into GPU instances 1 (3g.40gb, pod trainer-0),
7 (1g.10gb, pod server-0) and 8 (1g.10gb, free); GPU 1 is a whole GPU held by pod whole-0.
"""

from __future__ import annotations

from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for

SCENARIO = str(REPO_ROOT / "tests" / "fixtures" / "mig-pods.yaml")
Series = tuple[str, str | None, str | None]  # gpu, GPU_I_ID, pod


def _power_series(args: list[str], env: dict[str, str] | None = None) -> tuple[list[Series], set[float]]:
    """The DCGM_FI_DEV_POWER_USAGE series (gpu, GPU_I_ID, pod) once the pods are attributed, and GPU 0's values."""
    with running_exporter(["--simulate", SCENARIO, "--collect-interval", "200", *args], env) as exporter:
        exporter.wait_healthy()

        def attributed() -> list[tuple[dict[str, str], float]] | None:
            samples = exporter.samples("DCGM_FI_DEV_POWER_USAGE")
            return samples if any(labels.get("pod") == "whole-0" for labels, _ in samples) else None

        samples = wait_for(attributed, 30.0, "GPU 1's power with pod whole-0")
    series = sorted(((labels["gpu"], labels.get("GPU_I_ID"), labels.get("pod")) for labels, _ in samples),
                    key=str)
    return series, {value for labels, value in samples if labels["gpu"] == "0"}


def test_default_repeats_chip_power_on_every_mig_instance_with_its_pod() -> None:
    series, gpu0_values = _power_series([])
    assert series == sorted([("0", "1", "trainer-0"), ("0", "7", "server-0"), ("0", "8", None),
                             ("1", None, "whole-0")], key=str)
    assert len(gpu0_values) == 1  # one chip reading, repeated (a sum must take it once per UUID)


def test_once_keeps_one_chip_series_per_gpu_without_instance_or_pod() -> None:
    series, _ = _power_series(["--mig-chip-series", "once"])
    assert series == sorted([("0", None, None), ("1", None, "whole-0")], key=str)
    env_series, _ = _power_series([], {"GPU_POD_EXPORTER_MIG_CHIP_SERIES": "once"})
    assert env_series == series


def test_an_explicit_devices_selector_wins_over_the_layout() -> None:
    series, _ = _power_series(["--mig-chip-series", "once", "-d", "g"])
    assert series == sorted([("0", None, None), ("1", None, "whole-0")], key=str)
    series, _ = _power_series(["--mig-chip-series", "once", "-d", "f"])
    assert ("0", "7", "server-0") in series and ("0", None, None) not in series

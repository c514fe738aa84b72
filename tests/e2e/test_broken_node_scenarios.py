"""The broken-node scenarios show what their comments promise, in the exporter itself (not only in the doctor).

All four run at once (separate processes), each checked for the state its comment describes: GPU
metrics keep flowing, and the self-metric of the broken part says so.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from tests.support.exporter_process import ExporterProcess, parse_samples
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

# scenario -> (self-metric that must be 0, does the GPU series still carry a pod label)
PROMISES = {
    "kubelet-missing": ("gpu_pod_exporter_kubelet_up", False),
    "kubelet-gpu-mismatch": (None, True),
    "kube-api-forbidden": ("gpu_pod_exporter_kube_api_up", True),
    "kube-api-unreachable": ("gpu_pod_exporter_kube_api_up", True),
}


def _value(exporter: ExporterProcess, name: str) -> float | None:
    return next((value for sample, _, value in parse_samples(exporter.metrics()) if sample == name), None)


def _pods(exporter: ExporterProcess) -> set[str]:
    return {labels["pod"] for name, labels, _ in parse_samples(exporter.metrics())
            if name == "DCGM_FI_DEV_GPU_TEMP" and "pod" in labels}


def test_each_broken_node_scenario() -> None:
    with ExitStack() as stack:
        exporters = {}
        for name in PROMISES:
            exporter = ExporterProcess(["--simulate", name])
            stack.callback(exporter.stop)
            exporters[name] = exporter
        for name, (down, labelled) in PROMISES.items():
            exporter = exporters[name]
            exporter.wait_healthy(deadline_s=60)  # the GPUs are fine in every one of them
            if down is not None:
                wait_for(lambda exporter=exporter, down=down: _value(exporter, down) == 0.0, 30, f"{name}: {down} 0")
            if labelled:
                wait_for(lambda exporter=exporter: _pods(exporter), 30, f"{name}: pod labels from the kubelet")
            else:
                assert not _pods(exporter)
        mismatch = exporters["kubelet-gpu-mismatch"]
        assert _pods(mismatch) == {"trainer-0"}  # the stray pod's GPUs are not on this node's metrics

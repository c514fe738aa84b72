"""The hand-off objects: the GpuRepairRequest body, the validation Job, and reading the Job's outcome."""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType

import pytest

from exporter.remediate.alerts import Alert
from exporter.remediate.nodestate import TAINT_KEY
from exporter.remediate.repair import Validation, episode_name, job_outcome, repair_request, validation_job

SINCE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def alert(name: str, fingerprint: str, **labels: str) -> Alert:
    return Alert(status="firing", labels=MappingProxyType({"alertname": name, **labels}),
                 annotations=MappingProxyType({}), starts_at=SINCE, ends_at=None, fingerprint=fingerprint)


def test_the_repair_request_carries_node_gpus_uuids_and_the_evidence() -> None:
    body = repair_request("gpu-7", SINCE, {"GPU-b": "5", "GPU-a": "3"},
                          [alert("GpuXidFatal", "f1", xid="79"), alert("GpuRowRemapFailure", "f2",
                                                                       reason="row_remap_failure")])
    assert body["kind"] == "GpuRepairRequest" and body["metadata"]["name"] == episode_name("gpu-7", SINCE)
    assert body["spec"] == {
        "nodeName": "gpu-7", "requestedAt": "2024-05-01T12:00:00Z",
        "gpus": [{"uuid": "GPU-a", "index": "3"}, {"uuid": "GPU-b", "index": "5"}],
        "evidence": [{"alert": "GpuXidFatal", "fingerprint": "f1", "since": "2024-05-01T12:00:00Z", "xid": "79"},
                     {"alert": "GpuRowRemapFailure", "fingerprint": "f2", "since": "2024-05-01T12:00:00Z",
                      "reason": "row_remap_failure"}]}
    assert episode_name("gpu-7", SINCE) != episode_name("gpu-7", SINCE.replace(hour=13))  # one per episode


def test_the_validation_job_runs_the_users_image_on_the_node_through_our_taint() -> None:
    job = validation_job("gpu-7", SINCE, Validation(image="diag:1", namespace="ops", command=("dcgmi", "diag")))
    assert job["metadata"]["namespace"] == "ops" and job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-7" and pod["restartPolicy"] == "Never"
    assert {"key": TAINT_KEY, "operator": "Exists"} in pod["tolerations"]
    assert pod["containers"] == [{"name": "validate", "image": "diag:1", "command": ["dcgmi", "diag"],
                                  "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]


@pytest.mark.parametrize(("status", "outcome"), [
    ({}, "running"),
    ({"active": 1}, "running"),
    ({"succeeded": 1}, "succeeded"),
    ({"failed": 1}, "failed"),
    ({"conditions": [{"type": "Complete", "status": "True"}]}, "succeeded"),
    ({"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}, "succeeded"),
    ({"conditions": [{"type": "FailureTarget", "status": "True"}]}, "failed"),
    ({"conditions": [{"type": "Failed", "status": "False"}], "active": 1}, "running"),
])
def test_the_job_outcome_follows_its_status(status: dict[str, object], outcome: str) -> None:
    assert job_outcome({"status": status}) == outcome

"""``report quota`` against the real API server: the cost rig's known use, real ResourceQuotas (issue 43).

Prometheus is the report tests' backfilled TSDB (tests/report/conftest.py: the hand-computed use of
tests/report/test_quota.py's docstring); the ResourceQuotas are real objects of scripts/cluster's
kube-apiserver, created by someone else (a client-side ``create``, as an administrator's kubectl
would) with other keys beside the GPU one. It shows:

* the plan read from the real objects is the hand-computed one;
* ``--output yaml`` is accepted by the real API server as a server-side apply (``dryRun=All``,
  the field manager and ``force`` that the file's header tells people to use), and would set
  exactly the proposed values, leaving the other keys;
* ``--apply --dry-run`` changes nothing; ``--apply`` changes exactly the namespaces of the plan
  (and only their GPU keys); asked again with the same use, the plan has nothing left to lower;
* the DRA device-class quota key (``<class>.deviceclass.resource.k8s.io/devices``) is accepted and
  planned like the device plugin's at the pinned version;
* a kubeconfig without the right to list ResourceQuotas: one line, exit 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.api import Api, ApiError
from exporter.report import quotacli
from tests.platform.support import ensure_namespace
from tests.report.conftest import Backfilled, build
from tests.report.tsdb import BackfilledPrometheus

GPU_KEY = "requests.nvidia.com/gpu"
DRA_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
QUOTAS = {  # namespace -> spec.hard as an administrator created it
    "sandbox": {GPU_KEY: "4", "pods": "20"},
    "ml-training": {GPU_KEY: "8", DRA_KEY: "8", "requests.cpu": "64"},
    "inference": {GPU_KEY: "2"},
    "batch": {GPU_KEY: "2"},
    "notebooks": {GPU_KEY: "4"},
    "idle-team": {GPU_KEY: "3"},
}
EXPECTED = {  # hand-computed: tests/report/test_quota.py
    "sandbox": {GPU_KEY: "2", "pods": "20"},
    "ml-training": {GPU_KEY: "3", DRA_KEY: "3", "requests.cpu": "64"},
    "inference": {GPU_KEY: "2"},
    "batch": {GPU_KEY: "1"},
    "notebooks": {GPU_KEY: "4"},
    "idle-team": {GPU_KEY: "0"},
}
CHANGED = {"sandbox", "ml-training", "batch", "idle-team"}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("quota-tsdb"))
    try:
        yield build(prometheus)
    finally:
        prometheus.stop()


def hard(admin: Api) -> dict[str, dict[str, str]]:
    return {namespace: dict(admin.get(f"/api/v1/namespaces/{namespace}/resourcequotas/gpus")["spec"]["hard"])
            for namespace in QUOTAS}


@pytest.fixture
def quotas(admin: Api) -> Iterator[None]:
    for namespace, spec in QUOTAS.items():
        ensure_namespace(admin, namespace)
        admin.create(f"/api/v1/namespaces/{namespace}/resourcequotas", {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"}, "spec": {"hard": spec}})
    try:
        yield
    finally:
        for namespace in QUOTAS:
            admin.delete(f"/api/v1/namespaces/{namespace}")


def run(rig: Backfilled, kubeconfig: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = quotacli.main(["--prometheus", rig.url, "--start", "2025-06-02T00:00:00Z", "--end", "2025-06-04T00:00:00Z",
                          "--step", "2m", "--cluster", "east", "--kubeconfig", str(kubeconfig), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_plan_from_real_quotas_applies_as_reviewed(rig: Backfilled, admin: Api, kubeconfig: Path, quotas: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(rig, kubeconfig, capsys, "--output", "json")
    assert code == 0, err
    plan = {(r["namespace"], r["resource"]): (r["current"], r["proposed"], r["action"])
            for r in json.loads(out)["rows"]}
    assert plan == {(ns, key): (int(QUOTAS[ns][key]), int(EXPECTED[ns][key]),
                                "too-little-data" if ns == "notebooks" else
                                "lower" if EXPECTED[ns][key] != QUOTAS[ns][key] else "keep")
                    for ns in QUOTAS for key in (GPU_KEY, DRA_KEY) if key in QUOTAS[ns]}

    # the YAML, as a person would apply it: server-side, our field manager, forced (an admin created the keys)
    code, out, err = run(rig, kubeconfig, capsys, "--output", "yaml")
    assert code == 0, err
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert {d["metadata"]["namespace"] for d in documents} == CHANGED
    for document in documents:
        namespace = document["metadata"]["namespace"]
        answer: dict[str, Any] = admin.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/resourcequotas/gpus"
            "?dryRun=All&fieldManager=gpu-pod-exporter-quota&force=true", document, "application/apply-patch+yaml")
        assert answer["spec"]["hard"] == EXPECTED[namespace]  # only the GPU keys change
    assert hard(admin) == QUOTAS  # a dry run stores nothing

    code, _, err = run(rig, kubeconfig, capsys, "--apply", "--dry-run")
    assert code == 0, err
    assert err.count("server dry run: would apply ResourceQuota") == len(CHANGED)
    assert hard(admin) == QUOTAS

    code, _, err = run(rig, kubeconfig, capsys, "--apply")
    assert code == 0, err
    assert hard(admin) == EXPECTED  # exactly the plan's namespaces and keys changed
    for namespace in CHANGED:
        managers = {m["manager"] for m in admin.get(
            f"/api/v1/namespaces/{namespace}/resourcequotas/gpus")["metadata"]["managedFields"]}
        assert "gpu-pod-exporter-quota" in managers

    code, out, err = run(rig, kubeconfig, capsys)
    assert code == 0, err
    assert "Nothing to lower." in out  # the same use: the proposal is the new quota


def test_a_reader_without_rights_gets_one_line_and_exit_1(rig: Backfilled, admin: Api, kubeconfig: Path,
                                                          sa_token: Any, token_kubeconfig: Any, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ensure_namespace(admin, "quota-reader")
    try:
        admin.create("/api/v1/namespaces/quota-reader/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}})
    except ApiError as exc:
        if exc.status != 409:
            raise
    config = token_kubeconfig(sa_token("quota-reader", "nobody"), tmp_path / "nobody.kubeconfig")
    code = quotacli.main(["--prometheus", rig.url, "--start", "2025-06-02T00:00:00Z", "--end", "2025-06-04T00:00:00Z",
                          "--step", "2m", "--cluster", "east", "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == 1 and "reading ResourceQuotas: (403)" in err and len(err.strip().splitlines()) == 1

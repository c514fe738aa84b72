"""``report quota``: the plan on the cost rig (a real Prometheus, backfilled, known use), hand-computed.

The use is that of tests/report/test_backfill_exact.py (window 2025-06-02 to 06-04, cluster
``east``, 2-minute step): p95 of GPUs in use per namespace sandbox 1, ml-training 2, inference 1,
batch 5/7; notebooks held 24 measured GPU-hours (alice) and 48/7 unmeasured ones (bob's MIG slice
has no utilisation reading), i.e. 77.8 % measured. The ResourceQuotas come from a stand-in of the
client's ``CoreV1Api`` (the real API server's answers are tests/platform/test_quota.py's business).

Hand computation with the default 20 % headroom, rounded up to whole devices:

* sandbox     quota 4: 1 x 1.2 = 1.2 -> 2          lower 4 -> 2
* ml-training quota 8: 2 x 1.2 = 2.4 -> 3          lower 8 -> 3 (both its GPU keys)
* inference   quota 2: 1 x 1.2 = 1.2 -> 2          keep
* batch       quota 2: 5/7 x 1.2 = 0.857 -> 1      lower 2 -> 1
* notebooks   quota 4: 77.8 % measured < 90 %      left alone, named
* idle-team   quota 3: held nothing all window -> 0 lower 3 -> 0 (--min-quota raises it)
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.report import quotacli
from exporter.report.quota import QuotaError, device_count, quota_entries
from tests.report.conftest import Backfilled

REPO_ROOT = Path(__file__).resolve().parents[2]
DRA_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
GPU_KEY = "requests.nvidia.com/gpu"


def quota(namespace: str, name: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": hard}, "status": {}}


QUOTAS = [
    quota("sandbox", "gpus", {GPU_KEY: "4", "pods": "20"}),
    quota("ml-training", "gpus", {GPU_KEY: "8", DRA_KEY: "8", "requests.cpu": "64"}),
    quota("inference", "gpus", {GPU_KEY: "2"}),
    quota("batch", "gpus", {GPU_KEY: "2"}),
    quota("notebooks", "gpus", {GPU_KEY: "4"}),
    quota("idle-team", "gpus", {GPU_KEY: "3"}),
    quota("cpu-only", "compute", {"pods": "10"}),
]


class FakeCore:
    """What KubeApi sends through the API client for ``report quota``: the list, and server-side applies
    (recorded as namespace, name, body and the request's query and content type)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.applied: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []

    def request(self, method: str, path: str, query: Any = (), *, body: Any = None, content_type: str | None = None,
                timeout: Any = None) -> io.BytesIO:
        if method == "GET" and path == "/api/v1/resourcequotas":
            return io.BytesIO(json.dumps({"items": self.items}).encode())
        namespace, name = path.split("/")[4:7:2]  # /api/v1/namespaces/<ns>/resourcequotas/<name>
        assert method == "PATCH" and body is not None
        self.applied.append((namespace, name, body, {**dict(query), "content_type": content_type}))
        return io.BytesIO(json.dumps(body).encode())


@pytest.fixture
def core(monkeypatch: pytest.MonkeyPatch) -> FakeCore:
    fake = FakeCore(QUOTAS)
    monkeypatch.setattr("exporter.remediate.kubeapi.load_core_api", lambda kubeconfig: fake)
    return fake


def run(backfilled: Backfilled, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = quotacli.main(["--prometheus", backfilled.url, "--start", "2025-06-02T00:00:00Z",
                          "--end", "2025-06-04T00:00:00Z", "--step", "2m", "--cluster", "east", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_plan_is_the_hand_computed_one(backfilled: Backfilled, core: FakeCore,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(backfilled, capsys, "--output", "json")
    assert code == 0, err
    data = json.loads(out)
    rows = {(r["namespace"], r["resource"]): r for r in data["rows"]}
    plan = {key: (r["current"], r["proposed"], r["action"]) for key, r in rows.items()}
    assert plan == {
        ("sandbox", GPU_KEY): (4, 2, "lower"),
        ("ml-training", GPU_KEY): (8, 3, "lower"),
        ("ml-training", DRA_KEY): (8, 3, "lower"),
        ("inference", GPU_KEY): (2, 2, "keep"),
        ("batch", GPU_KEY): (2, 1, "lower"),
        ("notebooks", GPU_KEY): (4, 4, "too-little-data"),
        ("idle-team", GPU_KEY): (3, 0, "lower"),
    }
    assert rows[("sandbox", GPU_KEY)]["measured_need"] == pytest.approx(1.0)
    assert rows[("sandbox", GPU_KEY)]["with_headroom"] == pytest.approx(1.2)
    assert rows[("batch", GPU_KEY)]["measured_need"] == pytest.approx(5 / 7)
    assert rows[("batch", GPU_KEY)]["with_headroom"] == pytest.approx(5 / 7 * 1.2)
    assert rows[("idle-team", GPU_KEY)]["measured_need"] == 0
    assert "77.8 %" in rows[("notebooks", GPU_KEY)]["why"] and rows[("notebooks", GPU_KEY)]["measured_need"] is None
    assert data["left_alone"] == ["notebooks"]
    assert core.applied == []  # nothing without --apply


def test_headroom_and_min_quota_change_the_proposal(backfilled: Backfilled, core: FakeCore,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # 50 %: sandbox 1.5 -> 2, ml-training 3.0 -> 3, batch 1.07 -> 2 (= quota: keep); min 1: idle-team 1
    code, out, err = run(backfilled, capsys, "--output", "json", "--headroom", "50", "--min-quota", "1")
    assert code == 0, err
    plan = {(r["namespace"], r["resource"]): (r["proposed"], r["action"]) for r in json.loads(out)["rows"]}
    assert plan[("sandbox", GPU_KEY)] == (2, "lower")
    assert plan[("ml-training", GPU_KEY)] == (3, "lower")
    assert plan[("batch", GPU_KEY)] == (2, "keep")
    assert plan[("idle-team", GPU_KEY)] == (1, "lower")


def test_the_yaml_is_one_partial_resourcequota_per_object_to_lower(backfilled: Backfilled, core: FakeCore,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(backfilled, capsys, "--output", "yaml")
    assert code == 0, err
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert documents == [
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": namespace},
         "spec": {"hard": hard}}
        for namespace, hard in [("batch", {GPU_KEY: "1"}), ("idle-team", {GPU_KEY: "0"}),
                                ("ml-training", {DRA_KEY: "3", GPU_KEY: "3"}), ("sandbox", {GPU_KEY: "2"})]]
    assert "# notebooks/gpus requests.nvidia.com/gpu: left alone: utilisation was measured for 77.8 %" in out
    assert "--server-side --field-manager gpu-pod-exporter-quota --force-conflicts" in out


def test_text_names_the_left_alone_namespaces(backfilled: Backfilled, core: FakeCore,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(backfilled, capsys)
    assert code == 0
    document = (REPO_ROOT / "docs" / "cost.md").read_text(encoding="utf-8")
    shown = document.split("<!-- quota-sample: tests/report/test_quota.py -->\n```text\n", 1)[1].split("\n```", 1)[0]
    assert shown == out.rstrip("\n"), "docs/cost.md shows this plan: paste the new output there"
    assert "5 quota keys to lower, 16 devices taken back." in out  # 2 + 5 + 5 + 1 + 3
    assert "Left alone, too little data: notebooks." in out


def test_apply_sends_exactly_the_plan_as_server_side_apply(backfilled: Backfilled, core: FakeCore,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(backfilled, capsys, "--apply", "--dry-run")
    assert code == 0, err
    assert [(ns, name) for ns, name, _, _ in core.applied] == [
        ("batch", "gpus"), ("idle-team", "gpus"), ("ml-training", "gpus"), ("sandbox", "gpus")]
    options = core.applied[0][3]
    assert options["content_type"] == "application/apply-patch+yaml" and options["force"] == "true"
    assert options["fieldManager"] == "gpu-pod-exporter-quota" and options["dryRun"] == "All"
    assert "server dry run: would apply ResourceQuota sandbox/gpus: requests.nvidia.com/gpu=2" in err


# Every flag of `report quota` that takes a value a user can get wrong: each mistake names its flag.
@pytest.mark.parametrize(("argv", "message"), [
    (["--dry-run"], "--dry-run goes with --apply"),
    (["--range", "0s"], "--range: invalid duration '0s': must be longer than zero"),
    (["--step", "soon"], "--step: invalid duration 'soon'"),
    (["--start", "June"], "--start: invalid time 'June'"),
    (["--end", "June"], "--end: invalid time 'June'"),
    (["--period", "June"], "--period 'June': expected YYYY-MM"),
    (["--idle-threshold", "-1"], "--idle-threshold -1: must be a percentage"),
    (["--min-quota", "-1"], "--min-quota -1: must be >= 0"),
    (["--timeout", "0s"], "--timeout: invalid duration '0s'"),
    (["--retries", "-2"], "--retries -2: must be >= 0"),
    (["--max-samples", "0"], "--max-samples 0: must be >= 1"),
    (["--basic-auth-user", "alice"], "--basic-auth-user and --basic-auth-password-file go together"),
    (["--bearer-token-file", "/nonexistent/token"], "--bearer-token-file /nonexistent/token: No such file"),
    (["--ca-file", "/nonexistent/ca.pem"], "--ca-file /nonexistent/ca.pem: no such file"),
    (["--header", "x"], "--header 'x': expected 'Name: value'"),
    (["--headroom", "x"], "--headroom: invalid float value: 'x'"),
    (["--min-quota", "x"], "--min-quota: invalid int value: 'x'"),
    (["--min-coverage", "x"], "--min-coverage: invalid float value: 'x'"),
    (["--output", "xml"], "--output/-o: invalid choice: 'xml'"),
    (["--headroom", "-5"], "--headroom -5: must be >= 0"),
    (["--min-coverage", "101"], "--min-coverage 101: must be a percentage"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: no such file"),
    (["--output-file", "/nonexistent/dir/plan.yaml"], "--output-file /nonexistent/dir/plan.yaml: the directory"),
])
def test_mistakes_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert quotacli.main(["--prometheus", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-pod-exporter report quota: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_several_clusters_need_cluster(backfilled: Backfilled, core: FakeCore,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = quotacli.main(["--prometheus", backfilled.url, "--start", "2025-06-02T00:00:00Z",
                          "--end", "2025-06-04T00:00:00Z", "--step", "2m"])
    err = capsys.readouterr().err
    assert code == 2 and "--cluster" in err and "east" in err


def test_quantities() -> None:
    assert [device_count(v) for v in ("8", "0", "2k", "1Ki", "4.0")] == [8, 0, 2000, 1024, 4]
    for bad in ("1.5", "500m", "eight", ""):
        with pytest.raises(QuotaError):
            device_count(bad)


def test_unreadable_quota_values_are_named_and_left_alone() -> None:
    entries, notes = quota_entries([quota("a", "q", {GPU_KEY: "1.5"}),
                                    quota("b", "q", {GPU_KEY: "2"})], [GPU_KEY])
    assert [(e.namespace, e.hard) for e in entries] == [("b", 2)]
    assert notes == ["a/q requests.nvidia.com/gpu: '1.5' is not a whole number of devices; left alone"]


def test_an_unreachable_prometheus_is_one_line_and_exit_1(core: FakeCore, capsys: pytest.CaptureFixture[str]) -> None:
    code = quotacli.main(["--prometheus", "http://127.0.0.1:9", "--retries", "0", "--timeout", "2s",
                          "--cluster", "east"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("gpu-pod-exporter report quota: error: ") and len(err.strip().splitlines()) == 1
    assert core.applied == []

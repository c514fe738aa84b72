"""The report's numbers equal the hand-computed ones, read by a real Prometheus from a backfilled TSDB.

The data (tests/report/synthetic.py) is two days, 2025-06-02 and 06-03 UTC, of cluster ``east``:

* node-a, five whole H100s: ml-training/train-0 (research) holds GPUs 0 and 1 at 90 %;
  notebooks/nb-alice (research) holds GPU 2 at 0 % for the first 24 h, then releases it;
  sandbox/sandbox-0 (research) holds GPU 3, busy 50 % for hour 10-11 only, else 0 %;
  sandbox/sandbox-1 (research) holds GPU 4 at 80 %.
* node-b GPU 0, an A100 in MIG mode (7 compute slices): 3g.40gb held by batch/sweep-1 (team
  recsys from its pod label) at 50 % on day one and 2 % on day two; 2g.20gb held by batch/etl-0
  (no team) for hours 6-18 at 30 %; 1g.10gb held by notebooks/nb-bob (research) with no
  utilisation reading at all.
* node-b GPU 1, an A100 time-sliced: inference/chat-0 and chat-1 (serving) throughout,
  inference/embed-0 for hours 12-36 (so 1/2, 1/3, 1/2 each); 60 % until hour 40, then 2 %.
* Memory (MiB) and power (W) are constant per device: a0/a1 60000 MiB, 400 W; a2 2048, 100 W;
  a3 1024, 70 W; a4 20000, 300 W; b0 350 W with 3g 30000, 2g 10000 (while held), 1g 4000;
  b1 30000, 300 W.

Prices: 2.50 per H100 GPU-hour (the default), 1.50 per A100 GPU-hour. Idle: below 5 %.
Cluster ``west`` has raw exporter series only (no recording rules): the report must say so.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from exporter.report.cli import main
from tests.report.conftest import Backfilled
from tests.report.synthetic import A100

SEVENTH = 1 / 7
REL = 1e-9


def report(backfilled: Backfilled, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["--prometheus", backfilled.url, "--start", "2025-06-02T00:00:00Z", "--end", "2025-06-04T00:00:00Z",
                 "--step", "2m", "--price-per-gpu-hour", "2.50", "--price-per-gpu-hour", f"{A100}=1.50", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def by_team(backfilled: Backfilled) -> dict[str, Any]:
    """The default report (by team, every cluster) as JSON, computed once for the module."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--prometheus", backfilled.url, "--start", "2025-06-02T00:00:00Z",
                     "--end", "2025-06-04T00:00:00Z", "--step", "2m", "--price-per-gpu-hour", "2.50",
                     "--price-per-gpu-hour", f"{A100}=1.50", "--format", "json"])
    assert code == 0
    return dict(json.loads(out.getvalue()))


def row(data: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    [found] = [r for r in data["rows"] if r[key] == name]
    return found


EXPECTED_TEAMS = {
    # research: train-0 2 GPUs x 48 h; nb-alice 1 x 24 h; nb-bob 1/7 x 48 h; sandbox-0 and -1 1 x 48 h each
    "research": {
        "allocated_gpu_hours": 96 + 24 + 48 * SEVENTH + 48 + 48,
        # 96 x 0.9 + 1 h x 0.5 (sandbox-0) + 48 x 0.8 (sandbox-1); alice 0 %, bob unmeasured
        "busy_gpu_hours": 86.4 + 0.5 + 38.4,
        "measured_gpu_hours": 96 + 24 + 48 + 48,
        # alice 24 h at 0 %; sandbox-0 47 h below 5 % (bob has no reading: not idle)
        "idle_gpu_hours": 24 + 47,
        "unmeasured_gpu_hours": 48 * SEVENTH,
        # MiB x hours / 1024: 2 x 60000 x 48, 2048 x 24, 4000 x 48, 1024 x 48, 20000 x 48
        "memory_gib_hours": (2 * 60000 * 48 + 2048 * 24 + 4000 * 48 + 1024 * 48 + 20000 * 48) / 1024,
        # kWh: 0.8 kW x 48; 0.1 x 24; 0.35 x 1/7 x 48; 0.07 x 48; 0.3 x 48
        "energy_kwh": 0.8 * 48 + 0.1 * 24 + 0.35 / 7 * 48 + 0.07 * 48 + 0.3 * 48,
        # 216 H100 GPU-hours at 2.50, 48/7 A100 GPU-hours at 1.50; idle: 71 H100 GPU-hours
        "cost": 216 * 2.5 + 48 * SEVENTH * 1.5,
        "idle_cost": 71 * 2.5,
    },
    # serving: the time-sliced A100, held whole by its 2-3 pods for 48 h; 60 % for 40 h, 2 % for 8 h
    "serving": {
        "allocated_gpu_hours": 48.0,
        "busy_gpu_hours": 40 * 0.6 + 8 * 0.02,
        "measured_gpu_hours": 48.0,
        "idle_gpu_hours": 8.0,
        "unmeasured_gpu_hours": 0.0,
        "memory_gib_hours": 30000 * 48 / 1024,
        "energy_kwh": 0.3 * 48,
        "cost": 48 * 1.5,
        "idle_cost": 8 * 1.5,
    },
    # recsys: a 3g slice (3/7) for 48 h, 50 % on day one, 2 % (idle) on day two
    "recsys": {
        "allocated_gpu_hours": 48 * 3 / 7,
        "busy_gpu_hours": 24 * 3 / 7 * 0.5 + 24 * 3 / 7 * 0.02,
        "measured_gpu_hours": 48 * 3 / 7,
        "idle_gpu_hours": 24 * 3 / 7,
        "unmeasured_gpu_hours": 0.0,
        "memory_gib_hours": 30000 * 48 / 1024,
        "energy_kwh": 0.35 * 3 / 7 * 48,
        "cost": 48 * 3 / 7 * 1.5,
        "idle_cost": 24 * 3 / 7 * 1.5,
    },
    # no team: a 2g slice (2/7) for 12 h at 30 %
    "unassigned": {
        "allocated_gpu_hours": 12 * 2 / 7,
        "busy_gpu_hours": 12 * 2 / 7 * 0.3,
        "measured_gpu_hours": 12 * 2 / 7,
        "idle_gpu_hours": 0.0,
        "unmeasured_gpu_hours": 0.0,
        "memory_gib_hours": 10000 * 12 / 1024,
        "energy_kwh": 0.35 * 2 / 7 * 12,
        "cost": 12 * 2 / 7 * 1.5,
        "idle_cost": 0.0,
    },
}


@pytest.mark.parametrize("team", sorted(EXPECTED_TEAMS))
def test_each_team_s_bill_is_exact(by_team: dict[str, Any], team: str) -> None:
    found = row(by_team, "team", team)
    assert found["cluster"] == "east"
    for column, expected in EXPECTED_TEAMS[team].items():
        assert found[column] == pytest.approx(expected, rel=REL, abs=1e-9), column


def test_namespaces_and_models_of_each_team(by_team: dict[str, Any]) -> None:
    assert row(by_team, "team", "research")["namespaces"] == ["ml-training", "notebooks", "sandbox"]
    assert row(by_team, "team", "research")["models"] == [A100, "NVIDIA H100 80GB HBM3"]
    assert row(by_team, "team", "serving")["namespaces"] == ["inference"]
    assert row(by_team, "team", "recsys")["namespaces"] == ["batch"]
    assert row(by_team, "team", "unassigned")["namespaces"] == ["batch"]
    assert [r["team"] for r in by_team["rows"]] == ["research", "serving", "recsys", "unassigned"]  # by GPU-hours


def test_totals_and_cluster_capacity(by_team: dict[str, Any]) -> None:
    allocated = sum(team["allocated_gpu_hours"] for team in EXPECTED_TEAMS.values())
    assert by_team["total"]["allocated_gpu_hours"] == pytest.approx(264 + 216 / 7, rel=REL)
    assert by_team["total"]["allocated_gpu_hours"] == pytest.approx(allocated, rel=REL)
    assert by_team["total"]["cost"] == pytest.approx(sum(t["cost"] for t in EXPECTED_TEAMS.values()), rel=REL)
    [east] = [c for c in by_team["capacity"] if c["cluster"] == "east"]
    # 7 physical GPUs (5 H100, 2 A100) x 48 h; unallocated: GPU a2 for 24 h, the 2g slice for 36 h,
    # and the seventh slice of the MIG GPU that no instance uses (3g + 2g + 1g = 6/7)
    assert east["gpus_at_end"] == 7
    assert east["capacity_gpu_hours"] == pytest.approx(336, rel=REL)
    assert east["unallocated_gpu_hours"] == pytest.approx(24 + 36 * 2 / 7 + 48 / 7, rel=REL)
    assert east["coverage_percent"] == 100.0
    assert east["gaps"] == []


def test_gpus_to_give_back_per_namespace(by_team: dict[str, Any]) -> None:
    reclaim = {r["namespace"]: r for r in by_team["reclaim"]}
    # sandbox holds 2; in use 2 for 1 h (hour 10-11) and 1 for 47 h: p95 1 -> give back 1
    assert reclaim["sandbox"]["held_at_end"] == 2
    assert reclaim["sandbox"]["peak_in_use"] == 2
    assert reclaim["sandbox"]["p95_in_use"] == 1
    assert reclaim["sandbox"]["give_back"] == 1
    # notebooks: alice's idle GPU was already released; bob's 1/7 is unmeasured, so counted in use
    assert reclaim["notebooks"]["held_at_end"] == pytest.approx(SEVENTH, rel=REL)
    assert reclaim["notebooks"]["p95_in_use"] == pytest.approx(SEVENTH, rel=REL)
    assert reclaim["notebooks"]["give_back"] == 0
    assert reclaim["notebooks"]["idle_gpu_hours"] == pytest.approx(24, rel=REL)
    # batch: in use 3/7 for 12 h, 5/7 for 12 h, 0 for the idle day two; p95 (rank 1368 of 1440) is 5/7
    assert reclaim["batch"]["held_at_end"] == pytest.approx(3 / 7, rel=REL)
    assert reclaim["batch"]["peak_in_use"] == pytest.approx(5 / 7, rel=REL)
    assert reclaim["batch"]["p95_in_use"] == pytest.approx(5 / 7, rel=REL)
    assert reclaim["batch"]["give_back"] == 0
    # inference: in use 1 for 40 h, 0 for 8 h: p95 1
    assert reclaim["inference"]["p95_in_use"] == 1 and reclaim["inference"]["give_back"] == 0
    assert reclaim["ml-training"]["p95_in_use"] == 2 and reclaim["ml-training"]["give_back"] == 0
    assert [r["namespace"] for r in by_team["reclaim"]] == ["sandbox", "notebooks", "batch", "inference", "ml-training"]


def test_the_most_idle_pods(by_team: dict[str, Any]) -> None:
    pods = [(p["namespace"], p["pod"], p["team"], p["allocated_gpu_hours"], p["idle_gpu_hours"])
            for p in by_team["idle_pods"]]
    expected = [
        ("sandbox", "sandbox-0", "research", 48, 47),
        ("notebooks", "nb-alice", "research", 24, 24),
        ("batch", "sweep-1", "recsys", 48 * 3 / 7, 24 * 3 / 7),
        # chat-0 and chat-1: 1/2 for 12 h, 1/3 for 24 h, 1/2 for 12 h = 20 GPU-hours; idle 8 h x 1/2
        ("inference", "chat-0", "serving", 20, 4),
        ("inference", "chat-1", "serving", 20, 4),
    ]
    assert [p[:3] for p in pods] == [e[:3] for e in expected]
    for got, want in zip(pods, expected, strict=True):
        assert got[3:] == pytest.approx(want[3:], rel=REL)
    chat = by_team["idle_pods"][3]
    # busy: 12 h x 1/2 x 0.6 + 24 h x 1/3 x 0.6 + 4 h x 1/2 x 0.6 + 8 h x 1/2 x 0.02 = 9.68 of 20
    assert chat["utilization_percent"] == pytest.approx(100 * 9.68 / 20, rel=REL)


def test_daily_gpu_hours(by_team: dict[str, Any]) -> None:
    daily = {(d["day"], d["key"]): d for d in by_team["daily"]}
    assert daily[("2025-06-02", "research")]["allocated_gpu_hours"] == pytest.approx(120 + 24 / 7, rel=REL)
    assert daily[("2025-06-03", "research")]["allocated_gpu_hours"] == pytest.approx(96 + 24 / 7, rel=REL)
    assert daily[("2025-06-02", "research")]["busy_gpu_hours"] == pytest.approx(43.2 + 0.5 + 19.2, rel=REL)
    assert daily[("2025-06-03", "research")]["busy_gpu_hours"] == pytest.approx(43.2 + 19.2, rel=REL)
    assert daily[("2025-06-02", "unassigned")]["allocated_gpu_hours"] == pytest.approx(24 / 7, rel=REL)
    assert ("2025-06-03", "unassigned") not in daily
    assert {day for day, _ in daily} == {"2025-06-02", "2025-06-03"}


def test_the_cluster_without_recording_rules_is_named_with_what_is_missing(by_team: dict[str, Any]) -> None:
    [note] = [n for n in by_team["notes"] if n.startswith("cluster west")]
    assert "none of the report's recorded series are there" in note
    assert "namespace_team_model:gpu_fraction:sum" in note and "gpu_container:gpu_utilization:percent" in note
    assert "DCGM_EXP_GPU_ALLOCATION_INFO" in note
    assert "gpu-pod-exporter.cost-report" in note and "deploy/rules/gpu-pod-exporter-recording.yaml" in note
    assert not any(r["cluster"] == "west" for r in by_team["rows"])
    assert not any(n.startswith("cluster east") for n in by_team["notes"])


def test_by_namespace_and_one_cluster(backfilled: Backfilled, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(backfilled, capsys, "--by", "namespace", "--cluster", "east", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [(r["namespace"], r["teams"]) for r in data["rows"]] == [
        ("ml-training", ["research"]), ("sandbox", ["research"]), ("inference", ["serving"]),
        ("notebooks", ["research"]), ("batch", ["recsys", "unassigned"])]
    batch = row(data, "namespace", "batch")
    assert batch["allocated_gpu_hours"] == pytest.approx(48 * 3 / 7 + 12 * 2 / 7, rel=REL)
    assert batch["idle_gpu_hours"] == pytest.approx(24 * 3 / 7, rel=REL)
    assert row(data, "namespace", "notebooks")["unmeasured_gpu_hours"] == pytest.approx(48 / 7, rel=REL)
    assert data["notes"] == []  # west is not asked about


def test_peak_instead_of_p95_and_another_threshold(backfilled: Backfilled, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(backfilled, capsys, "--reclaim-by", "peak", "--idle-threshold", "1", "--format", "json",
                          "--cluster", "east")
    assert code == 0
    data = json.loads(out)
    reclaim = {r["namespace"]: r for r in data["reclaim"]}
    assert reclaim["sandbox"]["give_back"] == 0  # the peak (2) is what it holds
    # at 1 % the 2 % days are no longer idle
    assert row(data, "team", "recsys")["idle_gpu_hours"] == 0
    assert row(data, "team", "serving")["idle_gpu_hours"] == 0
    assert row(data, "team", "research")["idle_gpu_hours"] == pytest.approx(71, rel=REL)


def test_text_and_csv_show_the_same_numbers(backfilled: Backfilled, capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = report(backfilled, capsys, "--cluster", "east")
    assert code == 0
    assert "GPU cost and waste report, 2025-06-02T00:00:00Z to 2025-06-04T00:00:00Z (2d in 2m steps), by team" in text
    research = next(line for line in text.splitlines() if line.startswith("east") and " research " in line)
    assert "222.86" in research and "125.30" in research and "71.00" in research and "550.29" in research
    code, csv_text, _ = report(backfilled, capsys, "--cluster", "east", "--format", "csv", "--table", "reclaim")
    assert code == 0
    lines = csv_text.splitlines()
    assert lines[0].startswith("cluster,namespace,team,held at end (GPUs)")
    assert lines[1].startswith("east,sandbox,research,2,2,1,1,96,47")

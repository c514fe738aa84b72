"""The chargeback's totals equal hand-computed ones, for every pricing and sharing mode.

Same backfilled Prometheus and data as test_backfill_exact (tests/report/synthetic.py, cluster
``east``, 2025-06-02 and 06-03): per team, over the 48 h,

* research: 216 H100 GPU-hours (train-0 2 x 48, nb-alice 1 x 24, sandbox 2 x 48) on node-a, and
  nb-bob's A100 1g.10gb slice on node-b: 48/7 GPU-hours, 48 instance-hours; 60.96 kWh;
* serving: the time-sliced A100 on node-b, 48 GPU-hours (48 instance-hours); 14.4 kWh;
* recsys: the A100 3g.40gb slice, 3/7 x 48 = 144/7 GPU-hours, 48 instance-hours; 7.2 kWh;
* unassigned: the 2g.20gb slice for 12 h, 24/7 GPU-hours, 12 instance-hours; 1.2 kWh.

Capacity: 5 H100s and 2 A100s over 48 h; unallocated: the H100 nb-alice left (24 GPU-hours) and
the A100 slices nobody held (3/7 x 48 - 2/7 x 12 = 120/7 GPU-hours). kube-state-metrics series put
node-b in the node pool ``spot``, give notebooks the cost centre cc-300 and inference cc-200 (a
namespace label), and annotate the chat pods and ml-training with a project; train-0 (cc-100)
and sweep-1 (cc-200) carry the pod label.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from exporter.report.cli import main
from tests.report.conftest import Backfilled
from tests.report.synthetic import A100, H100

SEVENTH = 1 / 7
REL = 1e-6
ENERGY = {"research": 60.96, "serving": 14.4, "recsys": 7.2, "unassigned": 1.2}


def chargeback(backfilled: Backfilled, tmp_path: Path, pricing: str, *extra: str,
               start: str = "2025-06-02T00:00:00Z", end: str = "2025-06-04T00:00:00Z") -> dict[str, Any]:
    path = tmp_path / "pricing.yaml"
    path.write_text(pricing, encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--prometheus", backfilled.url, "--start", start, "--end", end, "--step", "2m",
                     "--pricing", str(path), "--format", "json", *extra])
    assert code == 0
    return dict(json.loads(out.getvalue())["chargeback"])


def totals(data: dict[str, Any], field: str = "cost") -> dict[str, float]:
    return {row["group"]: row[field] for row in data["totals"]}


MODELS_MIG_ENERGY = f"""
currency: EUR
default: 2.0
models:
  {H100}: 2.5
migProfiles:
  1g.10gb: 0.30
  3g.40gb: 0.80
energy:
  pricePerKWh: 0.25
"""
# research: 216 x 2.5 + 48 instance-hours x 0.30; serving: the A100 has no model price: default 2.0;
# recsys: 48 instance-hours x 0.80; unassigned: 2g.20gb has no profile price: 24/7 A100 GPU-hours x 2.0
GPU_COST_1 = {"research": 216 * 2.5 + 48 * 0.30, "serving": 48 * 2.0, "recsys": 48 * 0.80, "unassigned": 24 / 7 * 2.0}
UNALLOCATED_1 = 24 * 2.5 + 120 / 7 * 2.0


def test_prices_per_model_mig_profile_and_energy(backfilled: Backfilled, tmp_path: Path) -> None:
    data = chargeback(backfilled, tmp_path, MODELS_MIG_ENERGY)
    assert data["currency"] == "EUR"
    assert data["share_idle"] == "none"
    expected = {team: cost + ENERGY[team] * 0.25 for team, cost in GPU_COST_1.items()}
    assert totals(data) == pytest.approx(expected | {"(unallocated)": UNALLOCATED_1}, rel=REL)
    energy = totals(data, "energy_cost")
    assert energy.pop("(unallocated)") is None  # the energy of GPUs nobody held is not billed
    assert energy == pytest.approx({team: kwh * 0.25 for team, kwh in ENERGY.items()}, rel=REL)
    [bob] = [line for line in data["lines"] if line["mig_profile"] == "1g.10gb"]
    assert bob["group"] == "research"
    assert bob["gpu_hours"] == pytest.approx(48 * SEVENTH, rel=REL)
    assert bob["instance_hours"] == pytest.approx(48, rel=REL)
    assert bob["gpu_cost"] == pytest.approx(48 * 0.30, rel=REL)
    unallocated = {line["model"]: line["gpu_hours"] for line in data["lines"] if line["kind"] == "unallocated"}
    assert unallocated == pytest.approx({H100: 24.0, A100: 120 / 7}, rel=REL)


POOLS_ON_PREM = f"""
nodePools:
  label: cloud.google.com/gke-nodepool
  pools:
    spot:
      default: 1.2
onPrem:
  {H100}:
    purchasePrice: 26280
    years: 3
"""


def test_node_pool_from_kube_state_metrics_and_on_prem_amortisation(backfilled: Backfilled, tmp_path: Path) -> None:
    data = chargeback(backfilled, tmp_path, POOLS_ON_PREM)
    # H100s on node-a (no pool): 26280 / (3 x 8760 h) = 1.0 per hour; everything on node-b (spot): 1.2
    assert totals(data) == pytest.approx({
        "research": 216 * 1.0 + 48 / 7 * 1.2, "serving": 48 * 1.2, "recsys": 144 / 7 * 1.2,
        "unassigned": 24 / 7 * 1.2, "(unallocated)": 24 * 1.0 + 120 / 7 * 1.2}, rel=REL)
    assert {line["node_pool"] for line in data["lines"] if line["model"] == A100} == {"spot"}
    assert {line["node_pool"] for line in data["lines"] if line["model"] == H100} == {""}


STATIC_POOL_LIST_PRICES = f"""
nodePools:
  pools:
    reserved:
      nodes: [node-a]
      models:
        {H100}: 3.0
cloudListPrices: list-prices.csv
"""


def write_list_prices(tmp_path: Path) -> None:
    (tmp_path / "list-prices.csv").write_text(f"model,price_per_gpu_hour\n{A100},1.5\n{H100},9.9\n",
                                              encoding="utf-8")


def test_node_pool_by_node_name_and_cloud_list_prices(backfilled: Backfilled, tmp_path: Path) -> None:
    write_list_prices(tmp_path)
    data = chargeback(backfilled, tmp_path, STATIC_POOL_LIST_PRICES)
    # node-a is in "reserved" (H100 3.0, before the list price 9.9); A100s at the list price 1.5
    assert totals(data) == pytest.approx({
        "research": 216 * 3.0 + 48 / 7 * 1.5, "serving": 48 * 1.5, "recsys": 144 / 7 * 1.5,
        "unassigned": 24 / 7 * 1.5, "(unallocated)": 24 * 3.0 + 120 / 7 * 1.5}, rel=REL)


@pytest.mark.parametrize("mode", ["even", "proportional"])
def test_unallocated_capacity_shared_back(backfilled: Backfilled, tmp_path: Path, mode: str) -> None:
    data = chargeback(backfilled, tmp_path, MODELS_MIG_ENERGY, "--share-idle", mode)
    if mode == "even":
        shares = dict.fromkeys(GPU_COST_1, 0.25)
    else:  # by each team's GPU cost
        shares = {team: cost / sum(GPU_COST_1.values()) for team, cost in GPU_COST_1.items()}
    assert "(unallocated)" not in totals(data)
    assert totals(data, "unallocated_cost") == pytest.approx(
        {team: share * UNALLOCATED_1 for team, share in shares.items()}, rel=REL)
    assert totals(data) == pytest.approx({
        team: GPU_COST_1[team] + ENERGY[team] * 0.25 + share * UNALLOCATED_1 for team, share in shares.items()},
        rel=REL)
    assert sum(totals(data).values()) == pytest.approx(
        sum(GPU_COST_1.values()) + sum(ENERGY.values()) * 0.25 + UNALLOCATED_1, rel=REL)


def test_group_by_pod_label_then_namespace_label_then_unlabelled(backfilled: Backfilled, tmp_path: Path) -> None:
    data = chargeback(backfilled, tmp_path, "default: 1.0\n", "--group-by", "label:cost-center")
    assert data["group_by"] == "label:cost-center"
    # cc-100: train-0 (pod label); cc-300: notebooks (namespace label: nb-alice 24 + nb-bob 48/7);
    # cc-200: sweep-1 (pod label, 144/7) and inference (namespace label, 48); no label: sandbox, etl-0
    assert totals(data, "gpu_hours") == pytest.approx({
        "cc-100": 96.0, "cc-200": 48 + 144 / 7, "cc-300": 24 + 48 / 7, "unlabelled": 96 + 24 / 7,
        "(unallocated)": 24 + 120 / 7}, rel=REL)
    fallback = chargeback(backfilled, tmp_path, "default: 1.0\n", "--group-by", "label:cost-center",
                          "--group-fallback", "namespace")
    assert totals(fallback, "gpu_hours") == pytest.approx({
        "cc-100": 96.0, "cc-200": 48 + 144 / 7, "cc-300": 24 + 48 / 7, "sandbox": 96.0, "batch": 24 / 7,
        "(unallocated)": 24 + 120 / 7}, rel=REL)


def test_group_by_annotation(backfilled: Backfilled, tmp_path: Path) -> None:
    data = chargeback(backfilled, tmp_path, "default: 1.0\n", "--group-by", "annotation:billing.example.com/project")
    # chat-0 and chat-1: 1/2, 1/3 (hours 12-36) and 1/2 of the time-sliced A100: 20 GPU-hours each;
    # training: ml-training's namespace annotation (train-0, 96); the rest is unlabelled
    allocated = 216 + 216 / 7 + 48
    assert totals(data, "gpu_hours") == pytest.approx({
        "chat": 40.0, "training": 96.0, "unlabelled": allocated - 136, "(unallocated)": 24 + 120 / 7}, rel=REL)


def test_this_period_against_the_previous_one(backfilled: Backfilled, tmp_path: Path) -> None:
    write_list_prices(tmp_path)
    data = chargeback(backfilled, tmp_path, STATIC_POOL_LIST_PRICES, start="2025-06-03T00:00:00Z")
    assert data["previous_period"] == ["2025-06-02T00:00:00Z", "2025-06-03T00:00:00Z"]
    by_team = {row["group"]: row for row in data["totals"]}
    # research: day one 120 H100-hours (with nb-alice) x 3.0 + 24/7 x 1.5; day two 96 x 3.0 + 24/7 x 1.5
    research = by_team["research"]
    assert research["previous_cost"] == pytest.approx(120 * 3.0 + 24 / 7 * 1.5, rel=REL)
    assert research["cost"] == pytest.approx(96 * 3.0 + 24 / 7 * 1.5, rel=REL)
    assert research["change_percent"] == pytest.approx(100 * (-72) / (360 + 24 / 7 * 1.5), rel=REL)
    # unassigned (etl-0) only held its slice on day one: nothing now, 24/7 x 1.5 before
    assert by_team["unassigned"]["cost"] is None
    assert by_team["unassigned"]["previous_cost"] == pytest.approx(24 / 7 * 1.5, rel=REL)
    # unallocated: day one 3/7 x 24 - 2/7 x 12 A100; day two the H100 nb-alice left and 3/7 x 24 A100
    assert by_team["(unallocated)"]["previous_cost"] == pytest.approx(48 / 7 * 1.5, rel=REL)
    assert by_team["(unallocated)"]["cost"] == pytest.approx(24 * 3.0 + 72 / 7 * 1.5, rel=REL)

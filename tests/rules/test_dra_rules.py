"""The shipped alert and cost recording rules count DRA-allocated GPUs, proven on the exporter's real output.

The exporter runs the built-in ``dra-mixed`` scenario (device-plugin GPUs, DRA GPUs, a claim shared by
two pods, DRA MIG devices; its late slice made immediate so the test does not wait for it); one scrape
of the allocation and utilisation families becomes promtool's input series, held for 40 minutes, and
promtool evaluates the shipped rule files on them: the per-namespace and per-team GPU counts include
the DRA GPUs (a shared claim split 1/2 + 1/2), and GpuAllocatedButIdle fires for the idle DRA MIG device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.scenario import SCENARIO_DIR
from tests.rules.promtool_runner import ENGINE_IDS, ENGINES, RULE_FILES, run_promtool
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

FAMILIES = ("DCGM_EXP_GPU_ALLOCATED", "DCGM_EXP_GPU_ALLOCATION_INFO", "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
TARGET = {"instance": "10.0.0.9:9400", "job": "gpu-pod-exporter"}
Sample = tuple[dict[str, str], float]


def _series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{key}="{value}"' for key, value in {**labels, **TARGET}.items())
    return f"{name}{{{inner}}}"


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Sample]]:
    """One scrape of the scenario, shared by the runs under each engine's promtool."""
    return _scrape(tmp_path_factory.mktemp("dra-rules"))


def _scrape(tmp_path: Path) -> dict[str, list[Sample]]:
    scenario = tmp_path / "dra-mixed.yaml"
    text = (SCENARIO_DIR / "dra-mixed.yaml").read_text(encoding="utf-8")
    assert text.count("appears_after_s: 10") == 1
    scenario.write_text(text.replace("appears_after_s: 10", "appears_after_s: 0"), encoding="utf-8")
    with running_exporter(["--simulate", str(scenario)]) as exporter:
        exporter.wait_healthy()

        def attributed() -> dict[str, list[Sample]] | None:
            found = {name: exporter.samples(name) for name in FAMILIES}
            holders = [labels for labels, _ in found["DCGM_EXP_GPU_ALLOCATION_INFO"]]
            migs = [labels for labels, _ in found["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] if labels.get("GPU_I_ID")]
            ready = len(holders) == 7 and all("team" in labels for labels in holders) and len(migs) == 2
            return found if ready else None

        return wait_for(attributed, 30.0, "every device-plugin and DRA GPU attributed")


@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_cost_rules_and_the_idle_alert_count_dra_allocated_gpus(tmp_path: Path, scraped: dict[str, list[Sample]],
                                                               engine: str) -> None:
    info = scraped["DCGM_EXP_GPU_ALLOCATION_INFO"]
    assert sum(1 for labels, _ in info if "dra_claim_name" in labels) == 5  # 2 whole + shared by 2 + 2 MIG
    # Idle: allocated devices whose utilisation (GPU_UTIL, or a MIG instance's GR engine activity) is < 5 %.
    allocated = {(labels["UUID"], labels.get("GPU_I_ID", "")) for labels, value in scraped["DCGM_EXP_GPU_ALLOCATED"]
                 if value == 1}
    busy = {(labels["UUID"], labels.get("GPU_I_ID", "")): value for labels, value in scraped["DCGM_FI_DEV_GPU_UTIL"]}
    busy.update({(labels["UUID"], labels["GPU_I_ID"]): value * 100 for labels, value in
                 scraped["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] if labels.get("GPU_I_ID")})
    idle_claims = {labels["dra_claim_name"] for labels, _ in info
                   if (labels["UUID"], labels.get("GPU_I_ID", "")) in allocated
                   and busy.get((labels["UUID"], labels.get("GPU_I_ID", "")), 100) < 5 and "dra_claim_name" in labels}
    assert "nb-small" in idle_claims  # the 1g.10gb DRA MIG device runs nothing

    tests = {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": _series(name, labels), "values": f"{value:g}x40"}
                             for name in FAMILIES for labels, value in scraped[name]],
            "promql_expr_test": [
                {"expr": "namespace:gpu_allocated:sum", "eval_time": "5m",
                 "exp_samples": [{"labels": f'namespace:gpu_allocated:sum{{namespace="{ns}"}}', "value": value}
                                 for ns, value in (("inference", 1), ("ml-training", 3), ("notebooks", 2))]},
                {"expr": "team:gpu_allocated:sum", "eval_time": "5m",
                 "exp_samples": [{"labels": f'team:gpu_allocated:sum{{team="{team}"}}', "value": value}
                                 for team, value in (("data-science", 2), ("research", 3), ("serving", 1))]},
                {"expr": "namespace:gpu_allocated_exclusive:count", "eval_time": "5m",
                 "exp_samples": [{"labels": f'namespace:gpu_allocated_exclusive:count{{namespace="{ns}"}}',
                                  "value": value}
                                 for ns, value in (("inference", 1), ("ml-training", 2), ("notebooks", 2))]},
                # The shared claim's GPU: one half per pod.
                {"expr": 'gpu_container:gpu_allocation_share:ratio{dra_claim_name="shared-eval"}', "eval_time": "5m",
                 "exp_samples": [{"labels": _series("gpu_container:gpu_allocation_share:ratio", labels), "value": 0.5}
                                 for labels, _ in info if labels.get("dra_claim_name") == "shared-eval"]},
                {"expr": 'count by (dra_claim_name) (ALERTS{alertname="GpuAllocatedButIdle", alertstate="firing", '
                         'dra_claim_name!=""})', "eval_time": "35m",
                 "exp_samples": [{"labels": f'{{dra_claim_name="{claim}"}}', "value": 1}
                                 for claim in sorted(idle_claims)]},
            ],
        }],
    }
    path = tmp_path / "dra.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = run_promtool("test", "rules", path, engine=engine)
    assert result.returncode == 0, result.stdout + result.stderr

"""Every built-in scenario, diagnosed: the verdicts a user sees, as JSON and as the table.

Each scenario runs once per output form through ``main`` (flags, environment, config loading,
simulation wiring, every check, the renderer), exactly as ``gpu-pod-exporter doctor --simulate
<scenario>`` does. ``EXPECTED`` lists, per scenario, the exit code and every row that must be
degraded or failed; any other problem row fails the test, so a scenario cannot quietly grow one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.scenario import builtin_scenarios, load_scenario
from tests.doctor.conftest import clean_environment
from tests.doctor.support import FAST, PATIENT, Run, doctor, documented_rows, undocumented_problems

Problem = tuple[str, str, str]  # (section, check, verdict)

EXPECTED: dict[str, tuple[int, set[Problem]]] = {
    "default": (0, set()),
    "consumer-gpu": (0, set()),
    "mig-h100": (0, set()),
    "shared-gpus": (0, set()),
    "dra-mixed": (0, set()),
    "memory-errors": (0, set()),
    "xid-storm": (0, set()),
    "realistic-latency": (0, set()),
    "no-driver": (1, {("nvml", "library", "failed")}),
    "init-recovers": (1, {("nvml", "library", "failed")}),
    "gpu-lost": (1, {("gpu 3", "identity", "failed")}),
    "hang": (1, {("gpu 5", "identity", "failed")}),
    "kubelet-missing": (1, {("kubelet", "socket", "failed")}),
    "kubelet-gpu-mismatch": (1, {("kubelet", "device ids", "failed")}),
    "kube-api-forbidden": (1, {("kubernetes api", "access list namespaces", "failed"),
                               ("kubernetes api", "access watch namespaces", "failed")}),
    "kube-api-unreachable": (1, {("kubernetes api", "connection", "failed")}),
    # every shipped alert's condition; the doctor sees the one GPU that fell off the bus, whose ID the
    # kubelet still hands out
    "alert-zoo": (1, {("gpu 7", "identity", "failed"), ("kubelet", "device ids", "degraded")}),
}


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[tuple[str, str], Run]]:
    """Each scenario diagnosed once as JSON and once as a table (shared by the tests below)."""
    results: dict[tuple[str, str], Run] = {}
    with pytest.MonkeyPatch.context() as patch:
        clean_environment(patch)
        for name in EXPECTED:
            deadline = PATIENT if load_scenario(name).latency_profile == "realistic" else FAST
            results[(name, "json")] = doctor("--simulate", name, "--json", *deadline)
            results[(name, "table")] = doctor("--simulate", name, *deadline)
    yield results


def test_every_builtin_scenario_has_expected_verdicts() -> None:
    assert set(builtin_scenarios()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_verdicts(runs: dict[tuple[str, str], Run], name: str) -> None:
    code, problems = EXPECTED[name]
    run = runs[(name, "json")]
    report = run.json()
    assert run.code == code == report["exit_code"], run.output
    assert set(run.problems()) == problems, run.output
    assert report["simulated"].startswith(f"{name} at t=")
    assert report["verdict"] == ("ok" if code == 0 else "failed")
    for row in report["rows"]:
        if row["verdict"] in ("degraded", "failed"):
            assert row["hint"], row  # every problem says how to fix it


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_table_shows_each_problem_with_its_fix(runs: dict[tuple[str, str], Run], name: str) -> None:
    code, problems = EXPECTED[name]
    run = runs[(name, "table")]
    assert run.code == code
    lines = run.output.splitlines()
    assert lines[0].startswith("gpu-pod-exporter doctor: node ")
    assert f"(simulated: {name} at t=" in lines[0]
    assert "\033[" not in run.output  # not a terminal: no colour
    for section, check, verdict in problems:
        pattern = re.compile(rf"^{verdict.upper()}\s+{re.escape(section)}\s+{re.escape(check)}\s+\S")
        index = next(i for i, line in enumerate(lines) if pattern.match(line))
        assert lines[index + 1].strip().startswith("fix: "), run.output
    verdict = "OK" if code == 0 else "FAILED"
    assert re.fullmatch(rf"{verdict}: \d+ ok.* \(exit code {code}\)", lines[-1]), lines[-1]
    assert "Traceback" not in run.output


def test_the_readme_explains_every_problem_row(runs: dict[tuple[str, str], Run]) -> None:
    assert ("kubelet", "device ids") in documented_rows()
    assert not undocumented_problems([run for (_, form), run in runs.items() if form == "json"])


def test_no_driver_says_how_to_install_it(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("no-driver", "json")]
    row = run.row("nvml", "library")
    assert "NVMLError_LibraryNotFound" in row["detail"]
    assert "install the NVIDIA driver" in row["hint"]
    assert not [r for r in run.rows() if r["section"].startswith("gpu ")]


def test_gpu_lost_fails_that_gpu_only(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("gpu-lost", "json")]
    lost = run.row("gpu 3", "identity")
    assert "GpuIsLost" in lost["detail"] and "drain" in lost["hint"]
    for index in (0, 1, 2, 4, 5, 6, 7):
        assert run.row(f"gpu {index}", "identity")["verdict"] == "ok"
        assert run.row(f"gpu {index}", "counter DCGM_FI_DEV_GPU_TEMP")["data"]["state"] == "served"


def test_hang_names_the_call_and_does_not_wait_for_it() -> None:
    """The doctor gives up on the hung call at its own deadline and reports it. Judged on the outcome:
    the report names the call and its 1 s deadline, and it came back while the call still hung (the
    scenario's hang lasts ten minutes; a doctor that waited for it could not return before its end).
    How fast the doctor answers is not judged here: a busy machine only makes it slower."""
    [hang] = load_scenario("hang").hangs
    started = time.monotonic()
    run = doctor("--simulate", "hang", "--json", "--timeout", "1", "--address", "127.0.0.1:0")
    row = run.row("gpu 5", "identity")
    assert re.search(r"nvml\w+ on GPU 5 did not return within 1 s", row["detail"]), row
    assert "reset the GPU" in row["hint"]
    assert time.monotonic() - started < hang.at + hang.duration, "the doctor waited for the hung call to end"


def test_init_recovers_is_fine_once_the_driver_loaded() -> None:
    before = doctor("--simulate", "init-recovers", "--json", *FAST)
    assert "DriverNotLoaded" in before.row("nvml", "library")["detail"]
    after = doctor("--simulate", "init-recovers", "--at", "5s", "--json", *FAST)
    assert after.code == 0, after.output
    assert after.json()["simulated"] == "init-recovers at t=5 s"
    assert after.row("nvml", "gpus")["data"]["count"] == 4


def test_consumer_gpu_rows_it_cannot_serve_are_not_supported_not_failing(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("consumer-gpu", "json")]
    memory_temp = run.row("gpu 0", "counter DCGM_FI_DEV_MEMORY_TEMP")
    assert memory_temp["verdict"] == "ok" and memory_temp["data"]["state"] == "unsupported"
    assert "NotSupported" in memory_temp["data"]["error"]
    assert run.row("gpu 0", "counter DCGM_FI_DEV_GPU_TEMP")["data"]["state"] == "served"
    assert run.row("gpu 0", "gpm")["data"]["gpm"] is False
    table = runs[("consumer-gpu", "table")].output
    assert re.search(r"counters\s+\d+ served, \d+ not supported on this GPU \(.*DCGM_FI_DEV_MEMORY_TEMP", table)


def test_mig_gpu_rows(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("mig-h100", "json")]
    mig = run.row("gpu 0", "mig")
    assert mig["data"]["mig"] == "enabled" and len(mig["data"]["instances"]) == 7
    assert run.row("gpu 2", "mig")["data"]["mig"] == "disabled"
    assert run.row("gpu 0", "counter DCGM_FI_DEV_GPU_UTIL")["data"]["state"] == "unsupported"
    assert run.row("gpu 0", "counter DCGM_FI_DEV_FB_USED")["data"]["state"] == "served"  # per MIG instance


def test_memory_error_generations(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("memory-errors", "json")]
    assert run.row("gpu 0", "counter DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")["data"]["state"] == "served"  # A100
    assert run.row("gpu 2", "counter DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")["data"]["state"] == "unsupported"  # V100


def test_default_node_is_attributed(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("default", "json")]
    assert run.row("kubelet", "device ids")["data"]["unmatched"] == []
    assert run.row("kubernetes api", "access watch pods")["data"]["allowed"] is True
    # Process attribution is off, as in a real install: /proc is not read. The scenario asking for it is checked.
    assert run.row("processes", "host pids")["verdict"] == "skipped"
    assert runs[("shared-gpus", "json")].row("processes", "host pids")["verdict"] == "ok"
    for index in range(8):
        states = {row["check"]: row["data"]["state"] for row in run.rows()
                  if row["section"] == f"gpu {index}" and row.get("data", {}).get("kind") == "counter"}
        # page retirement predates Ampere: an H100 answers NotSupported for that default row
        unserved = {check for check, state in states.items() if state != "served"}
        assert unserved == {"counter DCGM_FI_DEV_RETIRED_PENDING"}


def test_gpu_mismatch_lists_the_ids_that_name_no_gpu(runs: dict[tuple[str, str], Run]) -> None:
    row = runs[("kubelet-gpu-mismatch", "json")].row("kubelet", "device ids")
    assert len(row["data"]["unmatched"]) == 4
    assert all(item.startswith("GPU-") for item in row["data"]["unmatched"])
    assert "NVIDIA_VISIBLE_DEVICES=all" in row["hint"]


def test_forbidden_namespaces_are_named(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[("kube-api-forbidden", "json")]
    assert run.row("kubernetes api", "access list pods")["verdict"] == "ok"
    assert "ClusterRole" in run.row("kubernetes api", "access list namespaces")["hint"]


def test_unreachable_api_server(runs: dict[tuple[str, str], Run]) -> None:
    row = runs[("kube-api-unreachable", "json")].row("kubernetes api", "connection")
    assert "refused" in row["detail"].lower() and "NetworkPolicies" in row["hint"]


def test_kubelet_missing(runs: dict[tuple[str, str], Run]) -> None:
    row = runs[("kubelet-missing", "json")].row("kubelet", "socket")
    assert "no socket at" in row["detail"] and "pod-resources" in row["hint"]


def _scenario(tmp_path: Path, body: str) -> str:
    path = tmp_path / "node.yaml"
    path.write_text("description: doctor test node\ngpu_count: 1\ngpu_defaults: {model: A100-SXM4-80GB}\n" + body,
                    encoding="utf-8")
    return str(path)


def test_a_failing_reading_is_failed_with_the_nvml_error(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "faults:\n  - {type: error, symbol: nvmlDeviceGetPowerUsage, error: Timeout}\n")
    run = doctor("--simulate", scenario, "--json", *FAST)
    row = run.row("gpu 0", "counter DCGM_FI_DEV_POWER_USAGE")
    assert row["verdict"] == "failed" and row["data"]["state"] == "failing"
    assert "nvmlDeviceGetPowerUsage" in row["detail"] and "Timeout" in row["detail"]
    assert run.code == 1


@pytest.mark.parametrize(("faults", "section", "check", "words"), [
    ("kubelet: wrong-socket", "kubelet", "list", ("does not serve", "device-plugins/kubelet.sock")),
    ("kubelet: rate-limited", "kubelet", "list", ("rate", "rate limit")),
    ("api_server: unauthorized", "kubernetes api", "connection", ("401", "token")),
    ("api_server: unavailable", "kubernetes api", "connection", ("503", "error")),
])
def test_broken_kubelet_and_api_server(tmp_path: Path, faults: str, section: str, check: str,
                                       words: tuple[str, str]) -> None:
    scenario = _scenario(tmp_path, "kubernetes:\n  pods: [{name: p, containers: [{name: c, gpus: [0]}]}]\n"
                                   f"  faults: {{{faults}}}\n")
    run = doctor("--simulate", scenario, "--json", *FAST)
    row = run.row(section, check)
    assert row["verdict"] in ("degraded", "failed"), row
    assert words[0].lower() in row["detail"].lower(), row
    assert words[1].lower() in row["hint"].lower(), row


def test_a_lost_gpus_device_ids_are_not_called_a_mismatch(tmp_path: Path) -> None:
    scenario = tmp_path / "lost.yaml"
    scenario.write_text("description: GPU 1 lost, its pod still holds it\ngpu_count: 2\n"
                        "gpu_defaults: {model: A100-SXM4-80GB}\nfaults:\n  - {type: gpu_lost, gpu: 1, at: 0s}\n"
                        "kubernetes:\n  pods: [{name: p, containers: [{name: c, gpus: [0, 1]}]}]\n", encoding="utf-8")
    run = doctor("--simulate", str(scenario), "--json", *FAST)
    assert set(run.problems()) == {("gpu 1", "identity", "failed"), ("kubelet", "device ids", "degraded")}
    row = run.row("kubelet", "device ids")
    assert "NVML cannot read GPU 1" in row["detail"] and "fix GPU 1 first" in row["hint"]


def test_with_configmap_counters_the_configmap_access_is_checked() -> None:
    run = doctor("--simulate", "default", "--json", *FAST, "-m", "gpu-monitoring:exporter-counters")
    row = run.row("kubernetes api", "access get configmaps gpu-monitoring/exporter-counters")
    assert row["verdict"] == "failed" and "Role" in row["hint"]  # the simulated identity has the ClusterRole only
    assert run.row("kubernetes api", "access watch pods")["verdict"] == "ok"

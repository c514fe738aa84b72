"""The benchmark matrix: GPU counts x pod counts x exporters, alternating A, B, A, B ...

For each configuration both exporters run back to back, and the order flips every repetition
(ours, nvitop / nvitop, ours / ...), so a slow drift of the shared machine's load hits both sides
alike. nvitop-exporter has no Kubernetes attribution: configurations with pods run ours only.
Pods need the Kubernetes wiring in the exporter; when the build lacks it, those configurations are
skipped and the results say so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import loadgen, nvmlprobe, runner, scenarios
from bench.runner import REPO_ROOT, Settings
from simulator.scenario import REALISTIC_FIELD_VALUE_LATENCY_S, REALISTIC_LATENCY_S

GPU_COUNTS = (1, 8, 64)
POD_COUNTS = (0, 110)
RESULTS_VERSION = 1


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        load = []
    packages: dict[str, str] = {}
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    for package in ("gpu-pod-exporter", "nvitop-exporter", "nvitop", "nvidia-ml-py", "prometheus-client"):
        try:
            packages[package] = version(package)
        except PackageNotFoundError:
            packages[package] = "not installed"
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "kernel": platform.release(), "loadavg_at_start": load, "packages": packages}


# What the harness itself writes: a results file or the report left uncommitted does not change what
# was measured, so it does not make the measured commit "dirty".
HARNESS_OUTPUTS = ("docs/benchmarks", "bench/results/")


def git_commit() -> str:
    """The short commit measured, with "-dirty" when tracked code differs from it (harness outputs aside)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    dirty = [line[3:] for line in changed if not line[3:].startswith(HARNESS_OUTPUTS)]
    return head + ("-dirty" if dirty else "")


def driver_model() -> dict[str, Any]:
    """The per-call driver latencies behind "driver latency per cycle", recorded with the results."""
    return {"latency_s": dict(REALISTIC_LATENCY_S), "blocking_window_s": dict(nvmlprobe.BLOCKING_WINDOW_S),
            "field_value_latency_s": REALISTIC_FIELD_VALUE_LATENCY_S}


def kubernetes_wiring_available() -> bool:
    """Whether this build attributes GPUs to pods (``-k`` is wired into the app)."""
    return importlib.util.find_spec("exporter.kube.wiring") is not None


class Cluster:
    """The simulated cluster of a scenario, in its own process (see bench/cluster.py)."""

    def __init__(self, scenario: Path, workdir: Path, pin: bool) -> None:
        command = [sys.executable, "-m", "bench.cluster", str(scenario), str(workdir)]
        self.process = subprocess.Popen(runner.pinned(command, runner.CLIENT_CPU, pin), cwd=REPO_ROOT,
                                        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"the simulated cluster did not start: {error.strip()}")
        self.flags: list[str] = json.loads(line)["flags"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_suite(settings: Settings, *, gpu_counts: tuple[int, ...] = GPU_COUNTS,
              pod_counts: tuple[int, ...] = POD_COUNTS, exporters: tuple[str, ...] = ("ours", "nvitop"),
              floor: bool = True, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the matrix; ``floor`` adds a run of ``bench.floor`` serving ours' bytes after each of ours."""
    started = time.time()
    results: dict[str, Any] = {
        "version": RESULTS_VERSION,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": git_commit(),
        "machine": machine_info(),
        "settings": asdict(settings),
        "pinned": settings.pin and runner.pinned(["x"], "0", True) != ["x"],
        "scrape_timeout_s": loadgen.SCRAPE_TIMEOUT_S,
        "driver_model": driver_model(),
        "skipped": [],
        "runs": [],
    }
    kube = kubernetes_wiring_available()
    with tempfile.TemporaryDirectory(prefix="bench-scenarios-") as tmp:
        directory = Path(tmp)
        for pods in pod_counts:
            if pods and not kube:
                results["skipped"].append(f"{pods} pods: this build has no Kubernetes attribution wiring (-k)")
                progress(f"skipping {pods} pods: no Kubernetes attribution wiring in this build")
                continue
            for gpus in gpu_counts:
                scenario = scenarios.write_scenario(directory, gpus, pods)
                gpu_only = scenarios.write_scenario(directory, gpus, pods, kubernetes=False)
                candidates = [name for name in exporters if not (pods and name == "nvitop")]
                if not candidates:
                    continue
                try:
                    cluster = Cluster(scenario, directory / f"cluster-{gpus}-{pods}", settings.pin) if pods else None
                except (RuntimeError, OSError, ValueError) as exc:
                    results["skipped"].append(f"{gpus} GPUs, {pods} pods: {exc}")
                    progress(f"skipping {gpus} GPUs, {pods} pods: {exc}")
                    continue
                try:
                    for repetition in range(settings.repetitions):
                        order = candidates if repetition % 2 == 0 else list(reversed(candidates))
                        for position, exporter in enumerate(order):
                            progress(f"[{gpus} GPUs, {pods} pods, run {repetition + 1}/{settings.repetitions}] "
                                     f"{exporter}")
                            extra = cluster.flags if cluster is not None and exporter == "ours" else []
                            measurement = runner.measure(exporter, gpus, pods, gpu_only, settings,
                                                         repetition=repetition, order=position,
                                                         extra_args=extra, progress=progress)
                            results["runs"].append(runner.as_dict(measurement))
                            if exporter == "ours" and measurement.payload and floor:
                                progress(f"[{gpus} GPUs, {pods} pods, run {repetition + 1}] floor")
                                floor_run = runner.measure_floor(
                                    measurement.payload, measurement.payload_headers, gpus, pods, settings,
                                    repetition=repetition, order=position, progress=progress)
                                results["runs"].append(runner.as_dict(floor_run))
                finally:
                    if cluster is not None:
                        cluster.stop()
    results["duration_s"] = time.time() - started
    return results

"""Start one exporter on simulated GPUs, with the NVML probe inside its process.

Usage (the harness runs this; by hand it is handy for a look)::

    python -m bench.launch ours   --scenario S.yaml --port 9400 --probe-port 9401 --interval-ms 1000
    python -m bench.launch nvitop --scenario S.yaml --port 8000 --probe-port 8001 --interval-ms 1000

Both exporters run their own, unmodified entry points (``exporter.cli.main`` and
``nvitop_exporter.cli.main``) on the same fake NVML library built from the same scenario, installed
the same way: the launcher puts it (behind the counting proxy) in as ``pynvml.nvmlLib`` before the
exporter initialises NVML, and pynvml then uses it instead of loading libnvidia-ml.so. So
gpu-pod-exporter runs its production code path, not ``--simulate`` (whose wiring would add the
simulator's own imports, e.g. the fake kubelet's grpc, to the measured process); with pods it is
pointed at the simulated cluster (run in another process) by its production ``-k`` flags.

The sampling cycle is counted where each exporter runs it: ``Sampler.run_cycle`` for ours; for
nvitop, one pass of its collect loop is ``update_host`` followed by ``update_device`` for every device
(the cycle ends with the last device). The thread CPU of nvitop's host metrics (psutil: load, memory,
network, disks) is recorded on its own, so the report can compare GPU work with GPU work.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import memtrace
from bench.nvmlprobe import ProbeServer, ProbeStats, put_in_front
from simulator.fakenvml import FakeNvmlLibrary

EXPORTERS = ("ours", "nvitop")


class _Holder:
    fake: FakeNvmlLibrary | None = None


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m bench.launch", description=__doc__.splitlines()[0])
    parser.add_argument("exporter", choices=EXPORTERS)
    parser.add_argument("--scenario", required=True, help="scenario YAML for the fake NVML library")
    parser.add_argument("--port", type=int, required=True, help="the exporter's /metrics port (127.0.0.1)")
    parser.add_argument("--probe-port", type=int, required=True, help="port of the JSON probe endpoint")
    parser.add_argument("--interval-ms", type=int, default=1000, help="sampling interval (both exporters)")
    args, extra = parser.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return args, extra


def _time_cycle(stats: ProbeStats, run: Callable[..., Any]) -> Callable[..., Any]:
    def run_cycle(*args: Any, **kwargs: Any) -> Any:
        cpu = time.thread_time()
        wall = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            stats.add_cycle(time.thread_time() - cpu, time.perf_counter() - wall)

    return run_cycle


def _install_fake(scenario: str, stats: ProbeStats, holder: _Holder) -> None:
    from simulator.scenario import load_scenario  # noqa: PLC0415

    fake = FakeNvmlLibrary(load_scenario(scenario))
    fake.install()
    put_in_front(fake, stats)
    holder.fake = fake


def run_ours(args: argparse.Namespace, extra: list[str], stats: ProbeStats, holder: _Holder) -> int:
    _install_fake(args.scenario, stats, holder)
    from exporter import cli  # noqa: PLC0415
    from exporter.nvml import sampler  # noqa: PLC0415

    sampler.Sampler.run_cycle = _time_cycle(stats, sampler.Sampler.run_cycle)  # type: ignore[method-assign]
    return cli.main(["--address", f"127.0.0.1:{args.port}", "--collect-interval", str(args.interval_ms), *extra])


def run_nvitop(args: argparse.Namespace, extra: list[str], stats: ProbeStats, holder: _Holder) -> int:
    _install_fake(args.scenario, stats, holder)
    from nvitop_exporter import cli  # type: ignore[import-untyped]  # noqa: PLC0415
    from nvitop_exporter.exporter import PrometheusExporter  # type: ignore[import-untyped]  # noqa: PLC0415

    update_host = PrometheusExporter.update_host
    update_device = PrometheusExporter.update_device
    cycle_start = [0.0, 0.0]

    def timed_update_host(self: Any) -> None:
        cycle_start[:] = [time.thread_time(), time.perf_counter()]
        with stats.measure_part("host_metrics"):
            update_host(self)

    def timed_update_device(self: Any, device: Any) -> None:
        with stats.measure_part("devices"):
            update_device(self, device)
        if device is self.devices[-1]:
            stats.add_cycle(time.thread_time() - cycle_start[0], time.perf_counter() - cycle_start[1])

    PrometheusExporter.update_host = timed_update_host
    PrometheusExporter.update_device = timed_update_device
    sys.argv = ["nvitop-exporter", "--bind-address", "127.0.0.1", "--port", str(args.port),
                "--interval", str(args.interval_ms / 1000), "--hostname", "bench-node", *extra]
    return int(cli.main())


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = _parse(sys.argv[1:] if argv is None else argv)
    trace = os.environ.get(memtrace.ENV)
    if trace:  # bench/memtrace.py: allocation sites at the highest traced memory
        memtrace.start_in_process(trace)
    stats = ProbeStats()
    holder = _Holder()
    ProbeServer(args.probe_port, stats, lambda: holder.fake).start()
    run = run_ours if args.exporter == "ours" else run_nvitop
    return run(args, extra, stats, holder)


if __name__ == "__main__":
    raise SystemExit(main())

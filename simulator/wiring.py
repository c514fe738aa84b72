"""``--simulate``: wire the fake NVML library into the app (the scenario's simulated Kubernetes node,
fake kubelet and API server, is wired by ``cluster_wiring``).

The fakes sit at the outermost edge, so the exporter runs its production code unchanged: the fake
library is installed as ``pynvml.nvmlLib`` before the sampler initialises NVML.
"""

from __future__ import annotations

from exporter.app import Extensions
from exporter.config import Config
from exporter.logs import get_logger
from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import Scenario

log = get_logger("simulate")


def simulation_extensions(config: Config, scenario: Scenario, extensions: Extensions | None = None) -> Extensions:
    """Add the simulator's start/stop hooks to ``extensions`` (created when None)."""
    extensions = extensions or Extensions()
    library = FakeNvmlLibrary(scenario)

    def start() -> None:
        library.install()
        log.info("simulating GPUs", extra={"fields": {"scenario": scenario.name, "gpus": len(scenario.gpus)}})

    extensions.before_nvml.append(start)
    extensions.on_stop.append(library.uninstall)
    return extensions

"""``--simulate``: the fake NVML library as a source of the hub (the scenario's simulated Kubernetes
node, fake kubelet and API server, is ``cluster_wiring``'s).

The fakes sit at the outermost edge, so the exporter runs its production code unchanged: the fake
library is installed as ``pynvml.nvmlLib`` before the sampler initialises NVML (a ``before_nvml``
service).
"""

from __future__ import annotations

from exporter.hub import Hub
from exporter.logs import get_logger
from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import Scenario

log = get_logger("simulate")


class FakeGpus:
    """The scenario's GPUs behind the fake NVML library, for as long as the app runs."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.library = FakeNvmlLibrary(scenario)

    def install(self, hub: Hub) -> None:
        hub.add_service(self.start, self.library.uninstall, before_nvml=True)

    def start(self) -> None:
        self.library.install()
        log.info("simulating GPUs", extra={"fields": {"scenario": self.scenario.name, "gpus": len(self.scenario.gpus)}})

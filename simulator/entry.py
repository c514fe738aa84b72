"""The one door from the product into the simulator.

``exporter.composition`` (the exporter's ``--simulate``) and ``exporter.doctor.cli`` (``doctor --simulate``)
import this module and nothing else of the simulator, and only inside the functions that run with
``--simulate``, so that the exporter without ``--simulate`` loads none of it. The import contract in
pyproject.toml (``[tool.importlinter]``, run by ``lint-imports`` in scripts/test) keeps it that way.
What crosses is typed by the product's protocols (``exporter.simulation``); the simulator may import
the product freely (it wires the product's own app).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config import Config
from exporter.hub import Hub
from exporter.simulation import DoctorInspection, SimulatedRun
from simulator.cluster_wiring import SimulatedClusterRunner, plan_simulated_cluster
from simulator.doctor import DoctorSimulation
from simulator.scenario import Scenario, load_scenario
from simulator.wiring import FakeGpus


@dataclass(frozen=True)
class PlannedRun:
    """``exporter.simulation.SimulatedRun``: the scenario, the configuration pointing at its node, and the
    runner of that node (``None`` without a ``kubernetes:`` section, or with Kubernetes mode turned off)."""

    config: Config
    scenario: Scenario
    cluster: SimulatedClusterRunner | None = None

    def install(self, hub: Hub) -> None:
        """One source of the hub: the fake GPUs (before NVML), then the simulated node (first of the rest)."""
        FakeGpus(self.scenario).install(hub)
        if self.cluster is not None:
            self.cluster.install(hub)

    def discard(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()  # removes its temporary directory; nothing was started yet


def plan_run(config: Config) -> SimulatedRun:
    """Load ``config.simulate`` (a built-in name or a file) and plan its simulated node.

    Raises ``ConfigError`` (a ``ScenarioError`` naming file:line: key) for a bad scenario.
    """
    scenario = load_scenario(config.simulate)
    planned, cluster = plan_simulated_cluster(config, scenario)
    return PlannedRun(planned, scenario, cluster)


def doctor_inspection(config: Config, at: float | None) -> DoctorInspection:
    """The doctor's view of ``config.simulate`` at scenario time ``at`` (default: just after its last fault).

    Raises ``ConfigError`` for a bad scenario.
    """
    return DoctorSimulation(config, at)

"""``doctor --simulate``: the scenario's fake GPUs and simulated node, looked at after its faults struck.

The exporter runs a scenario from t = 0 and lives through its timeline (GPU 3 of ``gpu-lost`` falls
off the bus at 30 s). The doctor is a snapshot, so it inspects the node at one scenario time:
``--at`` or, by default, just after the last scheduled fault began, so that each fault scenario
shows its fault (``no-driver``: NVML missing; ``gpu-lost``: GPU 3 lost; ``hang``: the hung call).

The wiring is the exporter's own (``FakeNvmlLibrary`` installed as ``pynvml``'s library, the
scenario's simulated kubelet, API server and ``/proc`` via ``plan_simulated_cluster``),
only with the fake library's clock shifted to the inspection time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

from exporter.config import Config
from exporter.doctor.deadline import join_abandoned
from simulator.cluster_wiring import plan_simulated_cluster
from simulator.fakenvml import FakeNvmlLibrary
from simulator.patterns import INFINITY
from simulator.scenario import Scenario, load_scenario

FAULT_SETTLE_S = 0.5  # look this long after the last fault began
RELEASE_WAIT_S = 5.0  # for probe threads to leave the fake library once its hangs are released


def inspection_time(scenario: Scenario) -> float:
    """Just after the last scheduled fault begins (0 when the scenario schedules none)."""
    starts = [lost.at for lost in scenario.lost]
    starts += [hang.at for hang in scenario.hangs]
    starts += [error.window.start for error in scenario.errors]
    finite = [start for start in starts if start != INFINITY and start >= 0]
    return max(finite) + FAULT_SETTLE_S if finite else 0.0


@dataclass
class DoctorSimulation:
    """Context manager: installs the fake library at the inspection time and runs the simulated node."""

    config: Config
    at: float | None = None
    scenario: Scenario = field(init=False)
    library: FakeNvmlLibrary = field(init=False)

    def __post_init__(self) -> None:
        self.scenario = load_scenario(self.config.simulate)  # ScenarioError (a ConfigError) for a bad file
        if self.at is None:
            self.at = inspection_time(self.scenario)
        started = time.monotonic()
        offset = self.at
        self.library = FakeNvmlLibrary(self.scenario, clock=lambda: offset + (time.monotonic() - started),
                                       wall_epoch=time.time() - offset)
        self.config, self._cluster = plan_simulated_cluster(self.config, self.scenario)

    @property
    def title(self) -> str:
        """``<scenario> at t=<seconds> s``: the doctor report's heading (``exporter.simulation.DoctorInspection``)."""
        return f"{self.scenario.name} at t={self.at:g} s"

    def __enter__(self) -> DoctorSimulation:
        self.library.install()
        try:
            if self._cluster is not None:
                self._cluster.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.library.release_hangs()  # an abandoned probe thread blocked in a simulated hang ends now
        join_abandoned(RELEASE_WAIT_S)
        if self._cluster is not None:
            self._cluster.stop()
        self.library.uninstall()

"""The simulator as the product sees it: the shapes of what crosses its one door, ``simulator.entry``.

The simulator (``--simulate``: fake NVML library, simulated kubelet and API server) is its own
top-level package, ``simulator``, shipped in the same wheel. The product reaches it only through
``simulator.entry``, imported inside the functions that run with ``--simulate`` (``exporter.composition``,
``exporter.doctor.cli``); the import contract in pyproject.toml (``[tool.importlinter]``) forbids every
other import of it. What the entry returns is typed here, in the product, so that the product's types
never depend on the simulator's modules: the simulator conforms to these protocols, not the reverse.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self

from exporter.config import Config

if TYPE_CHECKING:  # exporter.hub is the product's own; only its type is needed here
    from exporter.hub import Hub


class SimulatedRun(Protocol):
    """A ``--simulate`` run, planned before anything is wired (``exporter.composition.resolve``), then
    installed like every other optional source (``exporter.hub.Source``).

    ``config`` is the user's configuration completed by the scenario's simulated node (its kubelet
    socket, kubeconfig, ``/proc`` and node name, for the settings the user did not choose).
    """

    @property
    def config(self) -> Config: ...

    def install(self, hub: Hub) -> None:
        """Add the services that install the fake GPUs (before NVML) and run the simulated node."""

    def discard(self) -> None:
        """Release what planning took (the simulated node's directory) when the app is never started."""


class DoctorInspection(Protocol):
    """``doctor --simulate``: a context manager that puts the scenario's node in place at one scenario time."""

    @property
    def config(self) -> Config:
        """The doctor's configuration completed by the simulated node (as ``SimulatedRun.config``)."""

    @property
    def title(self) -> str:
        """What the report's heading says is being inspected: ``<scenario> at t=<seconds> s``."""

    def __enter__(self) -> Self: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None: ...

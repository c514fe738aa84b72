"""The state every part of the fake library shares, declared once so that each mixin is typed on its own.

``library.FakeNvmlLibrary.__init__`` sets these attributes; the mixins (readings, MIG, GPM, events,
faults) read them. The methods one mixin calls on another are declared for the type checker only.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.fakenvml.device import SimulatedGpu
    from simulator.fakenvml.events import EventSet, FakeEvent
    from simulator.fakenvml.faults import ErrorRule, HangRule
    from simulator.fakenvml.gpm import GpmSample
    from simulator.patterns import Window
    from simulator.scenario import InitFailure, ProcessSpec, Scenario


class LibraryState:
    """Attributes of the fake library (see ``FakeNvmlLibrary.__init__`` for what each holds)."""

    scenario: Scenario
    calls: Counter[str]
    gpm_short_intervals: int
    _clock: Callable[[], float]
    _epoch: float
    _state_lock: threading.Lock
    _driver_lock: threading.Lock
    _release: threading.Event
    _refcount: int
    _ever_initialized: bool
    _init_attempts: int
    _init_failure: InitFailure | None
    _latency: dict[str, float]
    _field_latency: float
    _gpus: tuple[SimulatedGpu, ...]
    _lost: list[Window]  # per GPU: when it answers GPU_IS_LOST
    _driver_loaded: bool
    _errors: dict[str, list[ErrorRule]]
    _field_errors: list[ErrorRule]
    _hangs: list[HangRule]
    _gpm_samples: dict[int, GpmSample | None]
    _gpm_next_sample: int
    _events: threading.Condition
    _event_sets: dict[int, EventSet]
    _next_event_set: int
    _scheduled: tuple[FakeEvent, ...]
    _wait_generation: int

    if TYPE_CHECKING:
        def elapsed(self) -> float: ...
        def release_waits(self) -> None: ...
        def _system(self, t: float) -> int: ...
        def _check_gpu(self, gpu: int | None) -> None: ...
        def _device_gate(self, name: str, gpu: int, t: float) -> int: ...
        def _gpu_for_index(self, index: int) -> Any: ...
        def _dispatch(self, name: str, gpu: int | None, t: float,  # noqa: PLR0917
                      implementation: Callable[..., int], args: tuple[Any, ...], blocking: bool = False) -> int: ...
        def _process_list(self, processes: list[tuple[ProcessSpec, int, int]], count: Any, infos: Any) -> int: ...

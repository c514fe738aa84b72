"""Injected faults: errors, hangs, lost GPUs and init failures, and the gates every call passes first."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from simulator.fakenvml.abi import DRIVER_NOT_LOADED, GPU_IS_LOST, SUCCESS, check_symbol
from simulator.fakenvml.state import LibraryState
from simulator.patterns import (
    INFINITY,
    Window,
)
from simulator.scenario import (
    ErrorFault,
    InitFailure,
    parse_error_code,
)

# A "*" fault (every symbol) spares these, so a test can always shut down and print errors.
_WILDCARD_EXEMPT = frozenset({"nvmlShutdown", "nvmlErrorString"})


@dataclass
class HangRule:
    symbol: str
    gpu: int | None
    start: float
    end: float
    holds_driver_lock: bool
    error: int | None
    released: bool = False


@dataclass(frozen=True)
class ErrorRule:
    symbol: str
    code: int
    gpu: int | None
    start: float
    end: float
    field: int | None

    def applies(self, gpu: int | None, t: float) -> bool:
        return (self.gpu is None or self.gpu == gpu) and self.start <= t < self.end




class FaultsMixin(LibraryState):
    """Fault injection (public) and the per-call gates that apply it (lost GPU, error rules, hangs)."""

    def inject_error(self, symbol: str, code: int | str, gpu: int | None = None,
                     from_s: float | None = None, until_s: float | None = None, *,
                     field: int | None = None) -> None:
        """Make calls of ``symbol`` (``"*"``: every symbol) fail with ``code`` on ``gpu`` (None: any).

        The window is scenario time ``[from_s, until_s)`` (default: from now on, forever). With
        ``field`` only that entry of ``nvmlDeviceGetFieldValues`` fails.
        """
        if symbol != "*":
            check_symbol(symbol)
        number = parse_error_code(code)
        self._check_gpu(gpu)
        start = self.elapsed() if from_s is None else from_s
        end = INFINITY if until_s is None else until_s
        fault = ErrorFault(symbol, number, gpu, Window(start, end), field)
        with self._state_lock:
            self._add_error_rule(fault)

    def clear_errors(self) -> None:
        with self._state_lock:
            self._errors.clear()
            self._field_errors.clear()

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus now: every call naming it answers GPU_IS_LOST until ``restore_gpu``."""
        self._check_gpu(index)
        with self._state_lock:
            self._lost[index] = Window(-INFINITY)

    def restore_gpu(self, index: int) -> None:
        """The lost GPU answers again from now on (it was reset), with the handle it had.

        As after a real reset, event sets forget the GPU: it must be registered again to deliver
        events. Restoring a GPU that is not lost changes nothing.
        """
        self._check_gpu(index)
        now = self.elapsed()
        with self._state_lock:
            lost = self._lost[index]
            if not lost.active(now):
                return
            self._lost[index] = Window(lost.start, now)
        with self._events:
            for event_set in self._event_sets.values():
                event_set.forget(index)

    def drop_driver(self) -> None:
        """The kernel driver goes away now: every call answers DRIVER_NOT_LOADED, and so does nvmlInit.

        Only ``nvmlShutdown`` and ``nvmlErrorString`` still work. ``restore_driver`` loads it again.
        """
        with self._state_lock:
            self._driver_loaded = False
        self.release_waits()

    def restore_driver(self) -> None:
        """The driver is loaded again. The old NVML session does not survive a reload: until the caller
        runs ``nvmlInit`` again every call answers UNINITIALIZED, and old event sets are gone."""
        with self._state_lock:
            if self._driver_loaded:
                return
            self._driver_loaded = True
            self._refcount = 0
        with self._events:
            self._event_sets.clear()
            self._events.notify_all()

    def hang(self, symbol: str, seconds: float, gpu: int | None = None, *,
             holds_driver_lock: bool = False) -> None:
        """Calls of ``symbol`` (on ``gpu``) block for ``seconds`` from now; ``release_hangs`` ends it."""
        if symbol != "*":
            check_symbol(symbol)
        self._check_gpu(gpu)
        start = self.elapsed()
        with self._state_lock:
            self._hangs.append(HangRule(symbol, gpu, start, start + seconds, holds_driver_lock, None))

    def release_hangs(self) -> None:
        """Wake every blocked call now and disable all hangs (scenario and runtime ones)."""
        with self._state_lock:
            for rule in self._hangs:
                rule.released = True
            released, self._release = self._release, threading.Event()
        released.set()
        self.release_waits()

    def fail_init(self, code: int | str, calls: int | None = None, until_s: float | None = None) -> None:
        """Make the next ``calls`` init attempts and/or those before ``until_s`` fail with ``code``."""
        with self._state_lock:
            self._init_attempts = 0
            self._init_failure = InitFailure(parse_error_code(code), calls, until_s)

    def _check_gpu(self, gpu: int | None) -> None:
        if gpu is not None and not 0 <= gpu < len(self._gpus):
            raise ValueError(f"no GPU {gpu} in this scenario ({len(self._gpus)} GPUs)")

    def _add_error_rule(self, fault: ErrorFault) -> None:
        window = fault.window
        rule = ErrorRule(fault.symbol, fault.code, fault.gpu, window.start, window.end, fault.field)
        if fault.field is not None:
            self._field_errors.append(rule)
        else:
            self._errors.setdefault(fault.symbol, []).append(rule)

    def _device_gate(self, name: str, gpu: int, t: float) -> int:
        """The per-GPU answer that preempts the real one: no driver, lost GPU, then injected errors."""
        if not self._driver_loaded:
            return DRIVER_NOT_LOADED
        if self._lost[gpu].active(t):
            return GPU_IS_LOST
        for rules in (self._errors.get(name), self._errors.get("*")):
            if rules:
                for rule in rules:
                    if rule.applies(gpu, t):
                        return rule.code
        return SUCCESS

    def _system_gate(self, name: str, t: float) -> int:
        if not self._driver_loaded and name not in _WILDCARD_EXEMPT:
            return DRIVER_NOT_LOADED
        wildcard = None if name in _WILDCARD_EXEMPT else self._errors.get("*")
        for rules in (self._errors.get(name), wildcard):
            if rules:
                for rule in rules:
                    if rule.gpu is None and rule.applies(None, t):
                        return rule.code
        return SUCCESS

    def _maybe_hang(self, name: str, gpu: int | None, t: float) -> int | None:
        # Take the release event before looking at ``released``: release_hangs marks the rules
        # first and then sets the old event, so a caller either sees the mark or gets woken.
        release = self._release
        for rule in list(self._hangs):
            if rule.released or not rule.start <= t < rule.end:
                continue
            if rule.symbol != name and (rule.symbol != "*" or name in _WILDCARD_EXEMPT):
                continue
            if rule.gpu is not None and rule.gpu != gpu:
                continue
            if rule.holds_driver_lock:
                with self._driver_lock:
                    release.wait(rule.end - t)
            else:
                release.wait(rule.end - t)
            return rule.error
        return None

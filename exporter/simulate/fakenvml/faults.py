"""Injected faults: errors, hangs, lost GPUs and init failures, and the gates every call passes first."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from exporter.simulate.fakenvml.abi import GPU_IS_LOST, SUCCESS, check_symbol
from exporter.simulate.fakenvml.state import LibraryState
from exporter.simulate.patterns import (
    INFINITY,
    Window,
)
from exporter.simulate.scenario import (
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
        """The GPU falls off the bus now: every call naming it answers GPU_IS_LOST from now on."""
        self._check_gpu(index)
        with self._state_lock:
            self._lost_at[index] = -INFINITY

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
        """The per-GPU answer that preempts the real one: lost GPU first, then injected errors."""
        if t >= self._lost_at[gpu]:
            return GPU_IS_LOST
        for rules in (self._errors.get(name), self._errors.get("*")):
            if rules:
                for rule in rules:
                    if rule.applies(gpu, t):
                        return rule.code
        return SUCCESS

    def _system_gate(self, name: str, t: float) -> int:
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

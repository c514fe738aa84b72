"""Logging: one line per event, text or JSON, and helpers that keep repeated states quiet.

An exporter that logs the same failure every sampling cycle buries the one line that matters, so
components report *state changes*: ``StateLog`` remembers the last state per key and only logs when
it changes; ``once`` logs a message the first time a key is seen.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

LOGGER_NAME = "gpu_pod_exporter"


def get_logger(component: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{component}")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra fields passed with ``extra={"fields": {...}}`` are merged."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "component": record.name.removeprefix(f"{LOGGER_NAME}."),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            payload.update(fields)
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level component: message key=value ...`` on one line (newlines in values escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        component = record.name.removeprefix(f"{LOGGER_NAME}.")
        line = f"{stamp} {record.levelname.lower():7s} {component}: {record.getMessage()}"
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        if record.exc_info:
            line += " exception=" + _text_value(self.formatException(record.exc_info))
        return line.replace("\n", "\\n")


def _text_value(value: object) -> str:
    text = str(value)
    if not text or any(ch.isspace() or ch in "\"=" for ch in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def configure(log_format: str, debug: bool) -> None:
    """Install the single stderr handler; safe to call more than once (tests do)."""
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False


class StateLog:
    """Logs a key's state only when it changes (e.g. "kubelet unavailable" once, then "recovered")."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._states: dict[Hashable, Hashable] = {}
        self._lock = threading.Lock()

    def change(self, key: Hashable, state: Hashable, level: int, message: str, **fields: Any) -> bool:
        """Record ``state`` for ``key``; log ``message`` and return True only if it differs from before."""
        with self._lock:
            if self._states.get(key, _UNSET) == state:
                return False
            self._states[key] = state
        self._logger.log(level, message, extra={"fields": fields})
        return True

    def once(self, key: Hashable, level: int, message: str, **fields: Any) -> bool:
        return self.change(key, True, level, message, **fields)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._states.pop(key, None)


_UNSET = object()


class RateLimitedLog:
    """At most one line per kind per ``interval_s``, carrying how many events it stands for.

    Connection-level trouble (failed TLS handshakes, resets, request heads that never finish) comes
    from clients, at whatever rate they like: a line per event would let any client flood the log and
    bury the lines that matter. The first event of a kind is logged at once; later ones within the
    interval are counted, and the next line after the interval says how many there were.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.counts: dict[str, int] = {}

    def event(self, kind: str, level: int, message: str, **fields: Any) -> bool:
        """Count one event of ``kind``; log it (with the count since the last line) if the interval passed."""
        now = self._clock()
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if now < self._next.get(kind, float("-inf")):
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._next[kind] = now + self._interval_s
            suppressed = self._suppressed.pop(kind, 0)
        extra = {**fields, "kind": kind}
        if suppressed:
            extra["more_since_last_line"] = suppressed
        self._logger.log(level, message, extra={"fields": extra})
        return True

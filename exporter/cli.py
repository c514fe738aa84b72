"""Command-line entry point: configuration errors become one line and exit code 2, never a traceback."""

from __future__ import annotations

import importlib
import logging
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter.app import App
from exporter.composition import build_app
from exporter.config import EXIT_CONFIG_ERROR, PROGRAM, Config, ConfigError, load_config
from exporter.hub import Source
from exporter.logs import configure, get_logger
from exporter.metrics.counters import CounterFileError, CounterSet, load_counters, parse_counters
from exporter.metrics.upstream_paths import resolve_collectors
from exporter.tools import TOOLS
from exporter.web.security import load_web_security

log = get_logger("cli")

EXIT_RUNTIME_ERROR = 1



def _fail(message: str, code: int = EXIT_CONFIG_ERROR) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # A tool shipped beside the exporter (exporter/tools.py, the one table); no tool named means the
    # exporter itself, so every dcgm-exporter command line keeps working.
    if arguments and arguments[0] in TOOLS:
        tool = importlib.import_module(TOOLS[arguments[0]].module)
        return int(tool.main(arguments[1:]))
    return run_exporter(arguments)


class _StartError(Exception):
    """An input that stops the start: one line on stderr and the exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_CONFIG_ERROR) -> None:
        super().__init__(message)
        self.code = code


def run_exporter(arguments: Sequence[str]) -> int:
    """The exporter itself: load and check every input, then serve until SIGTERM."""
    try:
        config = load_config(arguments)
    except ConfigError as exc:
        return _fail(str(exc))
    configure(config.log_format, config.debug)
    for warning in (*config.no_effect_warnings(), *config.notes):
        log.warning(warning)
    try:
        app = _checked_app(config)
    except _StartError as exc:
        return _fail(str(exc), exc.code)
    # Every input is good: say where this run differs from dcgm-exporter's defaults, and which generation.
    for difference in config.default_differences():
        log.info(difference)
    if config.compat_note:  # auto chose the release to match: say which and why, once
        log.info(config.compat_note)
    app.run()
    logging.shutdown()
    return 0


def _checked_app(config: Config) -> App:
    """Read every input the app needs (counters, web security, the listener), then compose it."""
    prepared: list[Source] = []  # sources read before wiring (their first read decides the counters)
    counters = _counters(config, prepared)
    try:
        security = load_web_security(config.web_config_file)
    except ConfigError as exc:  # WebConfigError names file:line: key itself
        raise _StartError(str(exc)) from None
    for warning in counters.warnings:
        log.warning(warning)
    listener = _inherited_listener() if config.web_systemd_socket else None
    try:
        return build_app(config, counters, security, listener=listener, extra=prepared)
    except ConfigError as exc:  # e.g. a scenario file (ScenarioError names file:line: key itself)
        raise _StartError(f"{config.source_of('simulate')}: {exc}") from None
    except OSError as exc:
        raise _StartError(f"cannot listen on {config.address}: {exc.strerror or exc}", EXIT_RUNTIME_ERROR) from None


def _counters(config: Config, prepared: list[Source]) -> CounterSet:
    """The counters to start with: the ConfigMap's (``-m``, which then refreshes them as a source), the
    config file's ``metrics.fields``, or the ``--collectors`` CSV (default: the built-in one)."""
    try:
        if config.configmap_data:
            counters = _configmap_counters(config, prepared)
            if counters is not None:
                return counters
        if config.inline_counters:
            return parse_counters(config.inline_counters, config.inline_counters_source)
    except CounterFileError as exc:
        raise _StartError(str(exc)) from None
    resolved = resolve_collectors(config.collectors, bool(config.collectors) and Path(config.collectors).exists())
    if resolved.note:
        log.info(resolved.note)
    try:
        return load_counters(resolved.path)
    except CounterFileError as exc:
        raise _StartError(f"{config.source_of('collectors')}: {exc}") from None


def _configmap_counters(config: Config, prepared: list[Source]) -> CounterSet | None:
    """``-m``: the ConfigMap's counters (None while it cannot be read); the source goes into ``prepared``."""
    from exporter.kube.configmap import ConfigMapCounters, ConfigMapUnavailableError  # noqa: PLC0415

    assert config.configmap_data is not None  # the caller checked -m
    configmap = ConfigMapCounters(config.configmap_data, config.kubeconfig, config.configmap_interval_ms / 1000)
    prepared.append(configmap)
    try:
        return configmap.read()
    except ConfigMapUnavailableError as exc:
        log.warning("%s; starting with %s and reading the ConfigMap again in the background", exc,
                    config.collectors or "the built-in default counters")
        return None


def _inherited_listener() -> socket.socket:
    """``--web-systemd-socket``: the socket systemd passed."""
    from exporter.web.socket_activation import inherited_socket  # noqa: PLC0415 - only with the flag

    try:
        return inherited_socket()
    except ConfigError as exc:
        raise _StartError(str(exc)) from None

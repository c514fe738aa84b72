"""Command-line entry point: configuration errors become one line and exit code 2, never a traceback."""

from __future__ import annotations

import importlib
import logging
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.app import App, Extensions
from exporter.config import EXIT_CONFIG_ERROR, PROGRAM, Config, ConfigError, load_config, with_implied_settings
from exporter.health.wiring import health_extensions
from exporter.logs import configure, get_logger
from exporter.metrics.counters import CounterFileError, CounterSet, load_counters, parse_counters
from exporter.metrics.selection import unknown_ids
from exporter.metrics.upstream_paths import resolve_collectors
from exporter.snapshot import Snapshot
from exporter.tools import TOOLS
from exporter.web.security import load_web_security
from exporter.web.server import WebSecurity

if TYPE_CHECKING:  # the simulator itself is imported only with --simulate, through simulator.entry
    from exporter.simulation import SimulatedRun

log = get_logger("cli")

EXIT_RUNTIME_ERROR = 1

# Tools that ship in the same package and image as the exporter (exporter/tools.py). No subcommand
# means the exporter, so every dcgm-exporter command line keeps working.
SUBCOMMANDS: dict[str, str] = {name: tool.module for name, tool in TOOLS.items()}


def _fail(message: str, code: int = EXIT_CONFIG_ERROR) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return code


def _warn_unknown_device_ids(config: Config, extensions: Extensions) -> None:
    """-d g:<ids> / i:<ids>: say once, at the first snapshot with GPUs, which ids name nothing here."""
    selection = config.devices
    if selection.gpu_ids is None and selection.instance_ids is None:
        return
    checked = False

    def check(snapshot: Snapshot) -> None:
        nonlocal checked
        if checked or not snapshot.devices:
            return
        checked = True
        problems = unknown_ids(selection, snapshot.devices)
        if problems:
            log.warning("--devices %s names %s, which this node does not have; they are left out",
                        selection, ", ".join(problems))

    extensions.on_snapshot.append(check)


@dataclass(frozen=True)
class Resolved:
    """The run's settings, fixed before anything is wired: every component reads this one ``Config``.

    With ``--simulate``, the planned simulated run (its scenario and Kubernetes node) travels beside
    it: the simulated node's paths are already part of ``config``.
    """

    config: Config
    simulation: SimulatedRun | None = None


def resolve(config: Config) -> Resolved:
    """The one step between loading the settings and wiring the app; nothing changes them afterwards.

    Two things complete what the user gave: the simulated node's endpoints (``--simulate`` with a
    ``kubernetes:`` section) for the settings the user did not choose, then the settings that others
    imply (``exporter.config.with_implied_settings``). Raises ``ConfigError`` for a bad scenario.
    """
    if not config.simulate:
        return Resolved(with_implied_settings(config))
    from simulator import entry  # noqa: PLC0415 - the simulator's one door, only with --simulate

    simulation: SimulatedRun = entry.plan_run(config)
    return Resolved(with_implied_settings(simulation.config), simulation)


def build_app(config: Config, counters: CounterSet, security: WebSecurity | None = None, *,
              listener: socket.socket | None = None) -> App:
    """Resolve the configuration (``resolve``), then assemble the app for it; raises user-facing errors."""
    resolved = resolve(config)
    try:
        return _wire(resolved, counters, security, listener)
    except BaseException:
        if resolved.simulation is not None:
            resolved.simulation.discard()  # nothing was started yet
        raise


def _wire(resolved: Resolved, counters: CounterSet, security: WebSecurity | None,
          listener: socket.socket | None) -> App:
    config = resolved.config
    extensions = Extensions()
    if resolved.simulation is not None:
        resolved.simulation.extend(extensions)  # the fake GPUs and simulated node start first
    kubernetes = None
    if config.kubernetes:
        from exporter.kube.wiring import kubernetes_extensions  # noqa: PLC0415 - grpc is only needed with -k

        kubernetes = kubernetes_extensions(config, extensions)
    hpc_jobs = None
    if config.hpc_job_mapping_dir:
        from exporter.hpcjobs import HpcJobMapping  # noqa: PLC0415 - only with --hpc-job-mapping-dir

        hpc_jobs = HpcJobMapping(config.hpc_job_mapping_dir, config.hpc_job_mapping_interval_ms / 1000)
        extensions.context_hooks.append(hpc_jobs.extend_context)  # after Kubernetes: repeats its label sets
        extensions.on_start.append(hpc_jobs.start)
        extensions.on_stop.append(hpc_jobs.stop)
    _warn_unknown_device_ids(config, extensions)
    health = health_extensions(config, counters, extensions)
    app = App(config, counters, security=security, extensions=extensions, listener=listener)
    health.bind(app)
    if kubernetes is not None:
        kubernetes.bind(app)
    if hpc_jobs is not None:
        hpc_jobs.on_change = app.cache.invalidate
    return app


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in SUBCOMMANDS:
        tool = importlib.import_module(SUBCOMMANDS[arguments[0]])
        return int(tool.main(arguments[1:]))
    return run_exporter(arguments)


def run_exporter(arguments: Sequence[str]) -> int:
    """The exporter itself: load and check every input, then serve until SIGTERM."""
    try:
        config = load_config(arguments)
    except ConfigError as exc:
        return _fail(str(exc))
    configure(config.log_format, config.debug)
    for warning in config.no_effect_warnings():
        log.warning(warning)
    for note in config.notes:
        log.warning(note)
    configmap = None
    counters: CounterSet | None = None
    if config.configmap_data:
        from exporter.kube.configmap import ConfigMapCounters, ConfigMapUnavailableError  # noqa: PLC0415

        configmap = ConfigMapCounters(config.configmap_data, config.kubeconfig, config.configmap_interval_ms / 1000)
        try:
            counters = configmap.read()
        except CounterFileError as exc:
            return _fail(str(exc))
        except ConfigMapUnavailableError as exc:
            log.warning("%s; starting with %s and reading the ConfigMap again in the background", exc,
                        config.collectors or "the built-in default counters")
    if counters is None and config.inline_counters:
        try:
            counters = parse_counters(config.inline_counters, config.inline_counters_source)
        except CounterFileError as exc:
            return _fail(str(exc))
    if counters is None:
        resolved = resolve_collectors(config.collectors, bool(config.collectors) and Path(config.collectors).exists())
        if resolved.note:
            log.info(resolved.note)
        try:
            counters = load_counters(resolved.path)
        except CounterFileError as exc:
            return _fail(f"{config.source_of('collectors')}: {exc}")
    try:
        security = load_web_security(config.web_config_file)
    except ConfigError as exc:  # WebConfigError names file:line: key itself
        return _fail(str(exc))
    for warning in counters.warnings:
        log.warning(warning)
    listener = None
    if config.web_systemd_socket:
        from exporter.web.socket_activation import inherited_socket  # noqa: PLC0415 - only with the flag

        try:
            listener = inherited_socket()
        except ConfigError as exc:
            return _fail(str(exc))
    try:
        app = build_app(config, counters, security, listener=listener)
    except ConfigError as exc:  # e.g. a scenario file (ScenarioError names file:line: key itself)
        return _fail(f"{config.source_of('simulate')}: {exc}")
    except OSError as exc:
        return _fail(f"cannot listen on {config.address}: {exc.strerror or exc}", EXIT_RUNTIME_ERROR)
    if configmap is not None:
        configmap.on_change = app.set_counters
        app.extensions.on_start.append(configmap.start)
        app.extensions.on_stop.append(configmap.stop)
    # Every input is good: say where this run differs from dcgm-exporter's defaults, and which generation.
    for difference in config.default_differences():
        log.info(difference)
    if config.compat_note:  # auto chose the release to match: say which and why, once
        log.info(config.compat_note)
    app.run()
    logging.shutdown()
    return 0

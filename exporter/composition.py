"""The composition root: the one place where the exporter's parts are built and connected.

In order, and nowhere else:

1. ``resolve``: the settings are completed once (``--simulate`` plans its simulated node, whose
   endpoints become settings; then the settings others imply). Nothing changes them afterwards.
2. The ``Hub`` (counters, sampler, exposition cache) is built first, so everything a source may call
   back exists before any source does.
3. Every optional source is built from its own small settings and installs itself through the one
   shape, ``source.install(hub)`` (``exporter.hub.Source``): the simulation (first: its fake GPUs and
   simulated node run before the sources that read them), Kubernetes (``exporter.kube.wiring``), HPC
   jobs (``exporter.hpcjobs``), the device-id check, health (``exporter.health.wiring``) and the
   ConfigMap counters (``exporter.kube.configmap``, read once by the command line before this).
4. The ``App`` is built around the hub; nothing is attached to it afterwards.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from exporter.app import App, ServeSettings, node_hostname
from exporter.config import Config, with_implied_settings
from exporter.health.wiring import HealthSettings, HealthTelemetry
from exporter.hub import Hub, SamplerSettings, Source
from exporter.kube.settings import (
    ApiSettings,
    KubeletSettings,
    KubernetesSettings,
    ProcessSettings,
    SeriesSettings,
    WorkloadSettings,
)
from exporter.logs import get_logger
from exporter.metrics.counters import CounterSet
from exporter.metrics.render import RenderOptions
from exporter.metrics.selection import DeviceSelection, effective_selection, unknown_ids
from exporter.snapshot import Snapshot
from exporter.web.server import WebSecurity

if TYPE_CHECKING:  # the simulator itself is imported only with --simulate, through simulator.entry
    from _typeshed import DataclassInstance

    from exporter.simulation import SimulatedRun

_Settings = TypeVar("_Settings", bound="DataclassInstance")

log = get_logger("cli")


@dataclass(frozen=True)
class Resolved:
    """The run's settings, fixed before anything is wired.

    With ``--simulate``, the planned simulated run (a source, installed first) travels beside it: the
    simulated node's paths are already part of ``config``.
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


class UnknownDeviceIds:
    """-d g:<ids> / i:<ids>: say once, at the first snapshot with GPUs, which ids name nothing here."""

    def __init__(self, selection: DeviceSelection) -> None:
        self.selection = selection
        self._checked = False

    def install(self, hub: Hub) -> None:
        if self.selection.gpu_ids is not None or self.selection.instance_ids is not None:
            hub.on_snapshot(self.check)

    def check(self, snapshot: Snapshot) -> None:
        if self._checked or not snapshot.devices:
            return
        self._checked = True
        problems = unknown_ids(self.selection, snapshot.devices)
        if problems:
            log.warning("--devices %s names %s, which this node does not have; they are left out",
                        self.selection, ", ".join(problems))


def render_options(config: Config) -> RenderOptions:
    return RenderOptions(hostname=node_hostname(config),
                         replace_blanks_in_model_name=config.replace_blanks_in_model_name,
                         devices=effective_selection(config.devices, config.mig_chip_series),
                         use_old_namespace=config.use_old_namespace, hostname_label=config.hostname_label)


def serve_settings(config: Config) -> ServeSettings:
    return ServeSettings(address=config.address, collect_interval_s=config.collect_interval_s,
                         max_connections=config.web_max_connections,
                         read_timeout_s=_if_set(config, "web_read_timeout_s"),
                         write_timeout_s=_if_set(config, "web_write_timeout_s"))


def _if_set(config: Config, attr: str) -> float | None:
    """A setting's value when the user gave one, else None (the component keeps its own default)."""
    return float(getattr(config, attr)) if attr in config.sources else None


def sampler_settings(config: Config) -> SamplerSettings:
    return SamplerSettings(
        interval_s=config.collect_interval_s,
        process_interval_s=config.process_interval_ms / 1000 if config.process_attribution else None,
        peak_window_s=config.peak_window_ms / 1000)


def kubernetes_settings(config: Config) -> KubernetesSettings:
    """The attribution's part of the resolved configuration, one group per component that reads it
    (``exporter.kube.settings``; every field is named as the setting it carries)."""
    return _named_settings(KubernetesSettings, config, kubelet=_named_settings(KubeletSettings, config),
                           api=_named_settings(ApiSettings, config),
                           workloads=_named_settings(WorkloadSettings, config),
                           processes=_named_settings(ProcessSettings, config),
                           series=_named_settings(SeriesSettings, config))


def _named_settings(settings: type[_Settings], config: Config, **groups: object) -> _Settings:
    """``settings`` filled from the configuration's fields of the same names (``groups`` given apart)."""
    fields = [item.name for item in dataclasses.fields(settings) if item.name not in groups]
    return settings(**{name: getattr(config, name) for name in fields}, **groups)


def health_settings(config: Config) -> HealthSettings:
    return HealthSettings(xid_count_window_ms=config.xid_count_window_ms,
                          clock_events_window_ms=config.clock_events_window_ms)


def optional_sources(resolved: Resolved, counters: CounterSet) -> list[Source]:
    """The sources this configuration turns on, in install (and start) order."""
    config = resolved.config
    sources: list[Source] = []
    if resolved.simulation is not None:
        sources.append(resolved.simulation)  # the fake GPUs and simulated node start first
    if config.kubernetes:
        from exporter.kube.wiring import KubernetesWiring  # noqa: PLC0415 - grpc is only needed with -k

        sources.append(KubernetesWiring(kubernetes_settings(config)))
    if config.hpc_job_mapping_dir:
        from exporter.hpcjobs import HpcJobMapping  # noqa: PLC0415 - only with --hpc-job-mapping-dir

        sources.append(HpcJobMapping(config.hpc_job_mapping_dir, config.hpc_job_mapping_interval_ms / 1000))
    sources.append(UnknownDeviceIds(config.devices))
    sources.append(HealthTelemetry(health_settings(config), counters))
    return sources


def build_app(config: Config, counters: CounterSet, security: WebSecurity | None = None, *,
              listener: socket.socket | None = None, extra: Sequence[Source] = ()) -> App:
    """Resolve the configuration, build the hub, install every source into it, build the app around it.

    ``extra`` are sources the command line prepared (the ConfigMap counters, read once before this);
    they install last. Raises user-facing errors (``ConfigError``, ``OSError`` for the listener).
    """
    resolved = resolve(config)
    try:
        resolved_config = resolved.config
        hub = Hub(counters, sampler_settings(resolved_config), render_options(resolved_config))
        for source in (*optional_sources(resolved, counters), *extra):
            source.install(hub)
        return App(hub, serve_settings(resolved_config), resolved_config, security=security,
                   listener=listener)
    except BaseException:
        if resolved.simulation is not None:
            resolved.simulation.discard()  # nothing was started yet
        raise

"""What the remediator may do: the policy file (YAML), validated with ``file:line: key`` errors.

Every key is optional; with no file at all the remediator runs in dry-run for the four default
alerts. Schema (docs/remediation.md explains each)::

    mode: dry-run                # dry-run | events | enforce
    node_label: Hostname         # the alert label holding the Kubernetes node name
    cluster: ""                  # when set: act only on alerts whose `cluster` label has this value
    alerts:                      # the allowlist (replaces the default one when given)
      GpuXidFatal:
        actions: [event, taint, annotate, condition]   # and/or cordon (opt-in)
        taint_effect: NoSchedule                         # PreferNoSchedule; NoExecute only when chosen
        untaint_after: never                             # hold after "resolved", e.g. 30m; never = a human does it
    limits:
      cooldown: 10m              # per node: minimum time between two transitions (taint <-> untaint)
      max_nodes_per_hour: 3      # circuit breaker: distinct nodes changed in any rolling hour
      max_tainted_percent: 10    # circuit breaker: share of GPU nodes carrying our taint at once
      gpu_resources: [nvidia.com/]   # allocatable resource prefixes that make a node a GPU node
    drain:                       # absent: no drain (the taint only keeps new pods away)
      mode: none                 # none | evict | allow-completion (exporter/remediate/drain.py)
      deadline: 1h               # allow-completion: evicted after this
      namespaces: {batch: allow-completion}
      pod_label: gpu-pod-exporter/drain
      unmanaged_pods: false
    repair_request: false        # create a GpuRepairRequest (CRD) once the node is quarantined and drained
    device_taints: false         # DRA clusters: a DeviceTaintRule per unhealthy GPU instead of the node taint
    validation:                  # absent: re-admission needs only the hold (untaint_after)
      image: registry.example/gpu-diag:1   # a Job with this image must succeed on the node first
      namespace: gpu-monitoring
      command: [dcgmi, diag, -r, "2"]

A mistake raises ``PolicyError`` (a ``ConfigError``): the subcommand prints it and exits 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from exporter import safeyaml
from exporter.config import ConfigError
from exporter.remediate.drain import DEFAULT_POD_LABEL, DRAIN_MODES, DrainPolicy
from exporter.remediate.repair import Validation
from exporter.safeyaml import YamlValue
from exporter.units import parse_go_duration

MODES = ("dry-run", "events", "enforce")
ACTIONS = ("event", "taint", "cordon", "annotate", "condition")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_ALERTS = ("GpuXidFatal", "GpuFallenOffBus", "GpuRowRemapFailure", "GpuEccUncorrectableError")
DEFAULT_ACTIONS = ("event", "taint", "annotate", "condition")
NEVER = ("never", "", None)


class PolicyError(ConfigError):
    """A mistake in the policy file or a flag; ``str()`` is the one line shown to the user."""


@dataclass(frozen=True)
class AlertPolicy:
    """What to do for one allowlisted alert."""

    actions: frozenset[str] = frozenset(DEFAULT_ACTIONS)
    taint_effect: str = "NoSchedule"
    untaint_after_s: float | None = None  # None: never cleared automatically

    def does(self, action: str) -> bool:
        return action in self.actions


@dataclass(frozen=True)
class Limits:
    """The safety limits (docs/remediation.md "Safety limits")."""

    cooldown_s: float = 600.0
    max_nodes_per_hour: int = 3
    max_tainted_percent: float = 10.0
    gpu_resources: tuple[str, ...] = ("nvidia.com/",)


@dataclass(frozen=True)
class Policy:
    mode: str = "dry-run"
    node_label: str = "Hostname"
    alerts: Mapping[str, AlertPolicy] = field(
        default_factory=lambda: MappingProxyType(dict.fromkeys(DEFAULT_ALERTS, AlertPolicy())))
    limits: Limits = Limits()
    source: str = "built-in defaults"
    cluster: str = ""  # "" acts on alerts of any cluster (one Alertmanager per cluster)
    drain: DrainPolicy | None = None  # None: no drain
    repair_request: bool = False
    validation: Validation | None = None  # None: no validation Job before re-admission
    device_taints: bool = False  # GPUs published through DRA: DeviceTaintRules (exporter/remediate/devicetaints.py)

    def for_alert(self, name: str) -> AlertPolicy | None:
        return self.alerts.get(name)

    @property
    def changes_nodes(self) -> bool:
        return self.mode == "enforce"


def load_policy(path: str | None, mode_override: str | None = None) -> Policy:
    """The policy from ``path`` (built-in defaults when None) with ``--mode`` applied; raises PolicyError."""
    policy = Policy() if not path else _parse_file(path)
    if mode_override is not None:
        if mode_override not in MODES:
            raise PolicyError("--mode", "mode", f"expected one of {', '.join(MODES)}, got {mode_override!r}")
        policy = replace(policy, mode=mode_override)
    return policy


# ---------------------------------------------------------------------------------------------
# The file, read with the shared YAML reader (exporter.safeyaml) so that every error names its line.


def _parse_file(path: str) -> Policy:
    root = safeyaml.YamlFile(path, PolicyError.at, shows_values=True, document_key="policy").load("policy")
    if root is None:
        return Policy(source=path)
    top = root.mapping(("mode", "node_label", "cluster", "alerts", "limits", "drain", "repair_request",
                        "validation", "device_taints"))
    defaults = Policy()
    return Policy(
        mode=top["mode"].plain(_choice(MODES)) if "mode" in top else defaults.mode,
        node_label=top["node_label"].plain(_label_name) if "node_label" in top else defaults.node_label,
        cluster=top["cluster"].convert(_label_value) if "cluster" in top else defaults.cluster,
        alerts=_alerts(top["alerts"]) if "alerts" in top else defaults.alerts,
        limits=_limits(top["limits"]) if "limits" in top else defaults.limits,
        source=path,
        drain=_drain(top["drain"]) if "drain" in top else None,
        repair_request=top["repair_request"].plain(_boolean) if "repair_request" in top else False,
        validation=_validation(top["validation"]) if "validation" in top else None,
        device_taints=top["device_taints"].plain(_boolean) if "device_taints" in top else False)


def _validation(value: YamlValue) -> Validation:
    fields = value.mapping(("image", "namespace", "command"))
    if "image" not in fields:
        raise value.error("required: the image of the validation Job", path="validation.image")
    return Validation(image=fields["image"].plain(_nonempty),
                      namespace=fields["namespace"].plain(_nonempty) if "namespace" in fields else "gpu-monitoring",
                      command=fields["command"].plain(_strings) if "command" in fields else ())


def _nonempty(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"expected a non-empty string, got {raw!r}")
    return raw


def _strings(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(item, str | int) for item in raw):
        raise ValueError("expected a non-empty list of strings")
    return tuple(str(item) for item in raw)


def _drain(value: YamlValue) -> DrainPolicy:
    fields = value.mapping(("mode", "deadline", "namespaces", "pod_label", "unmanaged_pods"))
    defaults = DrainPolicy()
    namespaces = {name: item.plain(_choice(DRAIN_MODES))
                  for name, item in (fields["namespaces"].mapping() if "namespaces" in fields else {}).items()}
    return DrainPolicy(
        mode=fields["mode"].plain(_choice(DRAIN_MODES)) if "mode" in fields else defaults.mode,
        deadline_s=fields["deadline"].plain(_duration) if "deadline" in fields else defaults.deadline_s,
        namespaces=MappingProxyType(namespaces),
        pod_label=fields["pod_label"].plain(_label_value) if "pod_label" in fields else DEFAULT_POD_LABEL,
        unmanaged_pods=fields["unmanaged_pods"].plain(_boolean) if "unmanaged_pods" in fields else False)


def _boolean(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ValueError(f"expected true or false, got {raw!r}")
    return raw


def _alerts(value: YamlValue) -> Mapping[str, AlertPolicy]:
    entries = value.mapping()
    if not entries:
        raise value.error("the allowlist is empty: name at least one alert")
    result: dict[str, AlertPolicy] = {}
    for name, item in entries.items():
        try:
            _label_name(name)
        except ValueError:
            raise item.error(f"expected an alert name (letters, digits, _), got {name!r}", line=item.key_line) \
                from None
        fields = item.mapping(("actions", "taint_effect", "untaint_after"))
        result[name] = AlertPolicy(
            actions=fields["actions"].plain(_actions) if "actions" in fields else frozenset(DEFAULT_ACTIONS),
            taint_effect=fields["taint_effect"].plain(_choice(TAINT_EFFECTS)) if "taint_effect" in fields
            else "NoSchedule",
            untaint_after_s=fields["untaint_after"].plain(_hold) if "untaint_after" in fields else None)
    return MappingProxyType(result)


def _limits(value: YamlValue) -> Limits:
    fields = value.mapping(("cooldown", "max_nodes_per_hour", "max_tainted_percent", "gpu_resources"))
    defaults = Limits()
    return Limits(
        cooldown_s=fields["cooldown"].plain(_duration) if "cooldown" in fields else defaults.cooldown_s,
        max_nodes_per_hour=fields["max_nodes_per_hour"].plain(_count) if "max_nodes_per_hour" in fields
        else defaults.max_nodes_per_hour,
        max_tainted_percent=fields["max_tainted_percent"].plain(_percent) if "max_tainted_percent" in fields
        else defaults.max_tainted_percent,
        gpu_resources=fields["gpu_resources"].plain(_resources) if "gpu_resources" in fields
        else defaults.gpu_resources)


# ---------------------------------------------------------------------------------------------
# Value parsers: raise ValueError with what was expected.


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        if raw not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return str(raw)
    return parse


def _label_name(raw: Any) -> str:
    if not isinstance(raw, str) or not raw or not (raw[0].isalpha() or raw[0] == "_") \
            or not all(ch.isalnum() or ch == "_" for ch in raw):
        raise ValueError(f"expected a Prometheus label name, got {raw!r}")
    return raw


def _label_value(raw: Any) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ValueError(f"expected the value of the alerts' cluster label (a string), got {raw!r}")
    return raw


def _actions(raw: Any) -> frozenset[str]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"expected a non-empty list of {', '.join(ACTIONS)}")
    unknown = [item for item in raw if item not in ACTIONS]
    if unknown:
        raise ValueError(f"unknown action {unknown[0]!r} (known: {', '.join(ACTIONS)})")
    return frozenset(raw)


def _duration(raw: Any) -> float:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        if raw < 0:
            raise ValueError(f"expected a duration >= 0, got {raw!r}")
        return float(raw)
    if not isinstance(raw, str):
        raise ValueError(f"expected a duration such as 10m or 1h, got {raw!r}")
    value = parse_go_duration(raw)
    if value < 0:
        raise ValueError(f"expected a duration >= 0, got {raw!r}")
    return value


def _hold(raw: Any) -> float | None:
    if raw in NEVER:
        return None
    return _duration(raw)


def _count(raw: Any) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ValueError(f"expected a whole number >= 0, got {raw!r}")
    return raw


def _percent(raw: Any) -> float:
    if not isinstance(raw, int | float) or isinstance(raw, bool) or not 0 <= raw <= 100:
        raise ValueError(f"expected a percentage from 0 to 100, got {raw!r}")
    return float(raw)


def _resources(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(item, str) and item for item in raw):
        raise ValueError("expected a non-empty list of resource name prefixes, e.g. [nvidia.com/]")
    return tuple(raw)

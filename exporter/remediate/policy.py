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
    validation:                  # absent: re-admission needs only the hold (untaint_after)
      image: registry.example/gpu-diag:1   # a Job with this image must succeed on the node first
      namespace: gpu-monitoring
      command: [dcgmi, diag, -r, "2"]

A mistake raises ``PolicyError`` (a ``ConfigError``): the subcommand prints it and exits 2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from exporter import safeyaml
from exporter.config import ConfigError
from exporter.remediate.drain import DEFAULT_POD_LABEL, DRAIN_MODES, DrainPolicy
from exporter.remediate.repair import Validation
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
# The file, walked as YAML nodes so that every error names its line.


class _Walker:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: yaml.Node, key: str, message: str) -> PolicyError:
        return PolicyError(f"{self.path}:{node.start_mark.line + 1}", key or "policy", message)

    def mapping(self, node: yaml.Node, key: str,
                allowed: tuple[str, ...] | None = None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a mapping")
        found: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value)
            path = f"{key}.{name}" if key else name
            if allowed is not None and name not in allowed:
                raise self.fail(key_node, path, safeyaml.unknown_key(name, allowed))
            if name in found:
                raise self.fail(key_node, path, "duplicate key")
            found[name] = (key_node, value_node)
        return found

    def value(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode | yaml.SequenceNode):
            raise self.fail(node, key, "expected a value or a list")
        return yaml.safe_load(yaml.serialize(node))

    def convert(self, node: yaml.Node, key: str, parse: Callable[[Any], Any]) -> Any:
        try:
            return parse(self.value(node, key))
        except ValueError as exc:
            raise self.fail(node, key, str(exc)) from None


def _parse_file(path: str) -> Policy:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise PolicyError(f"policy file {path}", "policy", f"cannot read: {reason}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PolicyError(f"{path}{line}", "yaml", f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if root is None:
        return Policy(source=path)
    walker = _Walker(path)
    top = walker.mapping(root, "", ("mode", "node_label", "cluster", "alerts", "limits", "drain",
                                           "repair_request", "validation"))
    defaults = Policy()
    mode = defaults.mode
    if "mode" in top:
        mode = walker.convert(top["mode"][1], "mode", _choice(MODES))
    node_label = defaults.node_label
    if "node_label" in top:
        node_label = walker.convert(top["node_label"][1], "node_label", _label_name)
    cluster = defaults.cluster
    if "cluster" in top:
        cluster = walker.convert(top["cluster"][1], "cluster", _label_value)
    alerts = defaults.alerts
    if "alerts" in top:
        alerts = _alerts(walker, top["alerts"][1])
    limits = defaults.limits
    if "limits" in top:
        limits = _limits(walker, top["limits"][1])
    drain = _drain(walker, top["drain"][1]) if "drain" in top else None
    repair = walker.convert(top["repair_request"][1], "repair_request", _boolean) if "repair_request" in top \
        else False
    validation = _validation(walker, top["validation"][1]) if "validation" in top else None
    return Policy(mode=mode, node_label=node_label, alerts=alerts, limits=limits, source=path, cluster=cluster,
                  drain=drain, repair_request=repair, validation=validation)


def _validation(walker: _Walker, node: yaml.Node) -> Validation:
    fields = walker.mapping(node, "validation", ("image", "namespace", "command"))
    if "image" not in fields:
        raise walker.fail(node, "validation.image", "required: the image of the validation Job")
    image = walker.convert(fields["image"][1], "validation.image", _nonempty)
    namespace = walker.convert(fields["namespace"][1], "validation.namespace", _nonempty) \
        if "namespace" in fields else "gpu-monitoring"
    command: tuple[str, ...] = ()
    if "command" in fields:
        command = walker.convert(fields["command"][1], "validation.command", _strings)
    return Validation(image=image, namespace=namespace, command=command)


def _nonempty(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"expected a non-empty string, got {raw!r}")
    return raw


def _strings(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(item, str | int) for item in raw):
        raise ValueError("expected a non-empty list of strings")
    return tuple(str(item) for item in raw)


def _drain(walker: _Walker, node: yaml.Node) -> DrainPolicy:
    fields = walker.mapping(node, "drain", ("mode", "deadline", "namespaces", "pod_label", "unmanaged_pods"))
    defaults = DrainPolicy()
    mode = defaults.mode
    if "mode" in fields:
        mode = walker.convert(fields["mode"][1], "drain.mode", _choice(DRAIN_MODES))
    deadline = defaults.deadline_s
    if "deadline" in fields:
        deadline = walker.convert(fields["deadline"][1], "drain.deadline", _duration)
    namespaces: dict[str, str] = {}
    if "namespaces" in fields:
        for name, (_, value_node) in walker.mapping(fields["namespaces"][1], "drain.namespaces").items():
            namespaces[name] = walker.convert(value_node, f"drain.namespaces.{name}", _choice(DRAIN_MODES))
    label = DEFAULT_POD_LABEL
    if "pod_label" in fields:
        label = walker.convert(fields["pod_label"][1], "drain.pod_label", _label_value)
    unmanaged = False
    if "unmanaged_pods" in fields:
        unmanaged = walker.convert(fields["unmanaged_pods"][1], "drain.unmanaged_pods", _boolean)
    return DrainPolicy(mode=mode, deadline_s=deadline, namespaces=MappingProxyType(namespaces), pod_label=label,
                       unmanaged_pods=unmanaged)


def _boolean(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ValueError(f"expected true or false, got {raw!r}")
    return raw


def _alerts(walker: _Walker, node: yaml.Node) -> Mapping[str, AlertPolicy]:
    entries = walker.mapping(node, "alerts")
    if not entries:
        raise walker.fail(node, "alerts", "the allowlist is empty: name at least one alert")
    result: dict[str, AlertPolicy] = {}
    for name, (key_node, value_node) in entries.items():
        key = f"alerts.{name}"
        _check_alert_name(walker, key_node, key, name)
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag.endswith(":null"):
            result[name] = AlertPolicy()
            continue
        fields = walker.mapping(value_node, key, ("actions", "taint_effect", "untaint_after"))
        actions = frozenset(DEFAULT_ACTIONS)
        if "actions" in fields:
            actions = walker.convert(fields["actions"][1], f"{key}.actions", _actions)
        effect = "NoSchedule"
        if "taint_effect" in fields:
            effect = walker.convert(fields["taint_effect"][1], f"{key}.taint_effect", _choice(TAINT_EFFECTS))
        hold: float | None = None
        if "untaint_after" in fields:
            hold = walker.convert(fields["untaint_after"][1], f"{key}.untaint_after", _hold)
        result[name] = AlertPolicy(actions=actions, taint_effect=effect, untaint_after_s=hold)
    return MappingProxyType(result)


def _limits(walker: _Walker, node: yaml.Node) -> Limits:
    fields = walker.mapping(node, "limits", ("cooldown", "max_nodes_per_hour", "max_tainted_percent",
                                             "gpu_resources"))
    defaults = Limits()
    cooldown = defaults.cooldown_s
    if "cooldown" in fields:
        cooldown = walker.convert(fields["cooldown"][1], "limits.cooldown", _duration)
    per_hour = defaults.max_nodes_per_hour
    if "max_nodes_per_hour" in fields:
        per_hour = walker.convert(fields["max_nodes_per_hour"][1], "limits.max_nodes_per_hour", _count)
    percent = defaults.max_tainted_percent
    if "max_tainted_percent" in fields:
        percent = walker.convert(fields["max_tainted_percent"][1], "limits.max_tainted_percent", _percent)
    resources = defaults.gpu_resources
    if "gpu_resources" in fields:
        resources = walker.convert(fields["gpu_resources"][1], "limits.gpu_resources", _resources)
    return Limits(cooldown_s=cooldown, max_nodes_per_hour=per_hour, max_tainted_percent=percent,
                  gpu_resources=resources)


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


def _check_alert_name(walker: _Walker, node: yaml.Node, key: str, name: str) -> None:
    try:
        _label_name(name)
    except ValueError:
        raise walker.fail(node, key, f"expected an alert name (letters, digits, _), got {name!r}") from None


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

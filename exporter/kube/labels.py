"""Which Kubernetes labels become Prometheus labels, and under which names.

Two policies live here because both turn Kubernetes labels into series labels:

* ``TeamResolver``: the single ``team`` label, from the first of ``--kubernetes-team-label-sources``
  (default ``pod:team``, then ``namespace:team``) that is set. One well-known label is what
  dashboards group by: Prometheus's naming guide allows a label that virtually every user wants,
  and copying arbitrary labels multiplies series, so exactly one, and other labels allowlist-only.
* ``PodLabelPolicy``: ``--kubernetes-enable-pod-labels`` copies allowlisted pod labels onto
  attributed series, as dcgm-exporter does, but bounded. dcgm-exporter copies them unprefixed
  and unbounded, and a pod label called ``gpu`` silently overrides the GPU index (its issue
  #585 hit Mimir's 30-labels-per-series limit). Here:

  - keys matching any ``--kubernetes-pod-label-allowlist-regex`` pattern are copied (patterns
    are unanchored searches on the original key, as in dcgm-exporter: write ``^app$`` for one
    exact key); an empty allowlist copies every label, still bounded;
  - keys are sanitised to ``[a-zA-Z0-9_]`` (every other character becomes ``_``), a leading
    digit gets a ``_`` prefix, and a leading ``__`` (reserved by Prometheus) is cut to one ``_``:
    ``app.kubernetes.io/name`` becomes ``app_kubernetes_io_name``;
  - a key that would collide with a built-in label (``RESERVED_LABELS``: ``gpu``, ``UUID``,
    ``pod``, ``team``, ``vgpu``, ``pid``, ... and Prometheus' own ``job``/``instance``/``le``) is
    never copied: built-ins always win;
  - two keys that sanitise to the same name: the first in sorted key order wins;
  - at most ``MAX_POD_LABELS`` (10) labels per pod, in sorted key order, so a series stays well
    under the 30-label limits of hosted Prometheus services;
  - a value longer than ``MAX_POD_LABEL_VALUE_LENGTH`` (256 characters) is not copied
    (Kubernetes itself caps label values at 63, so only a broken object trips this), and empty
    values are not copied (an empty Prometheus label is the same as no label).

  Values are passed through unmodified otherwise: quoting and escaping are the encoder's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from exporter.options import TeamSource

MAX_POD_LABELS = 10
MAX_POD_LABEL_VALUE_LENGTH = 256

# Labels the exporter itself sets somewhere (dcgm-exporter's label names, in both spellings
# where dcgm-exporter has two, plus ours), and the ones Prometheus reserves or adds to targets.
RESERVED_LABELS = frozenset({
    "gpu", "UUID", "uuid", "pci_bus_id", "device", "modelName", "model_name", "GPU_I_PROFILE", "GPU_I_ID",
    "Hostname", "hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod", "pod_uid", "team",
    "vgpu", "err_code", "err_msg", "xid", "pid", "container_name", "pod_name", "pod_namespace", "gpu_uuid",
    "nvlink", "nvswitch", "peer_gpu", "link_status", "window_size_in_ms", "clock_event", "health_watch",
    "health_error_code", "hpc_job", "dra_claim_name", "dra_claim_namespace", "dra_driver_name",
    "dra_pool_name", "dra_device_name", "dra_mig_profile", "dra_mig_device_uuid", "cpu", "cpucore",
    "job", "instance", "le", "quantile", "node",
})

_INVALID_NAME_CHARACTERS = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    """A Kubernetes label key as a Prometheus label name (see the module docstring)."""
    name = _INVALID_NAME_CHARACTERS.sub("_", key)
    if not name:
        return "_"
    if name[0].isdigit():
        name = "_" + name
    if name.startswith("__"):
        name = "_" + name.lstrip("_")
    return name


class PodLabelPolicy:
    """Selects, renames and bounds the pod labels copied onto series. Immutable."""

    def __init__(
        self,
        enabled: bool,
        allowlist: Sequence[str] = (),
        *,
        reserved: Iterable[str] = RESERVED_LABELS,
        max_labels: int = MAX_POD_LABELS,
        max_value_length: int = MAX_POD_LABEL_VALUE_LENGTH,
    ) -> None:
        self.enabled = enabled
        self._patterns = tuple(re.compile(pattern) for pattern in allowlist)
        self._reserved = frozenset(reserved)
        self._max_labels = max_labels
        self._max_value_length = max_value_length

    def _allowed(self, key: str) -> bool:
        return not self._patterns or any(pattern.search(key) for pattern in self._patterns)

    def select(self, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The ``(prometheus name, value)`` pairs to add, in sorted key order."""
        if not self.enabled:
            return ()
        chosen: dict[str, str] = {}
        for key in sorted(labels):
            if len(chosen) >= self._max_labels:
                break
            value = labels[key]
            if not value or len(value) > self._max_value_length or not self._allowed(key):
                continue
            name = sanitize_label_name(key)
            if name in self._reserved or name in chosen:
                continue
            chosen[name] = value
        return tuple(chosen.items())


class TeamResolver:
    """The ``team`` value: the first configured ``pod:<key>`` / ``namespace:<key>`` that is set.

    The sources arrive parsed (``exporter.options.parse_team_sources``, when the setting is read)."""

    def __init__(self, sources: Sequence[TeamSource]) -> None:
        self._sources = tuple(sources)

    def team(self, pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None) -> str | None:
        for source in self._sources:
            labels = pod_labels if source.kind == "pod" else (namespace_labels or {})
            value = labels.get(source.key)
            if value:
                return value
        return None

"""The Kubernetes attribution's own settings: what ``-k`` and its flags say, and nothing else.

Built once at the composition root (``exporter.composition.kubernetes_settings``) from the resolved
configuration; the attribution, its series and its wiring read only these (the package does not import
``exporter.config``: an import contract says so), so a change to any other setting cannot reach them.
The field names are the configuration's (``exporter.config.Config``), where each is declared with its
flag and help.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.options import TeamSource


@dataclass(frozen=True)
class KubernetesSettings:
    """The settings of the Kubernetes attribution (see the flags of the same names in ``--help``)."""

    kubernetes: bool
    node_name: str
    pod_resources_socket: str
    pod_resources_interval_ms: int
    kubernetes_gpu_id_type: str
    nvidia_resource_names: tuple[str, ...]
    kubeconfig: str
    kubeconfig_allow_exec: bool
    team_label_sources: tuple[TeamSource, ...]
    kubernetes_enable_pod_labels: bool
    kubernetes_pod_label_allowlist_regex: tuple[str, ...]
    kubernetes_enable_pod_uid: bool
    kubernetes_virtual_gpus: bool
    kubernetes_enable_dra: bool
    kubernetes_dra_driver_names: tuple[str, ...]
    process_attribution: bool
    process_metrics: bool
    proc_root: str
    peak_window_ms: int
    use_old_namespace: bool

"""The Kubernetes attribution's own settings: what ``-k`` and its flags say, grouped by who reads them.

Built once at the composition root (``exporter.composition.kubernetes_settings``) from the resolved
configuration; the package does not import ``exporter.config`` (an import contract says so), so a change
to any other setting cannot reach it. Each group is handed to the one component that reads it, so no
function below the attribution's facade is given the whole set:

* ``KubeletSettings``: the PodResources client (``exporter.kube.allocation``);
* ``ApiSettings``: the pod, namespace and ResourceSlice watches (``exporter.kube.metadata``);
* ``WorkloadSettings``: how a pod becomes a ``Workload`` (``attribution.WorkloadFactory``: team, pod labels);
* ``ProcessSettings``: process attribution (``exporter.kube.processes``);
* ``SeriesSettings``: the label spellings and which series are exported (``exporter.kube.series``).

The field names are the configuration's (``exporter.config.Config``), where each is declared with its
flag and help; the composition root fills each group by those names.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.options import TeamSource


@dataclass(frozen=True)
class KubeletSettings:
    """The kubelet PodResources client: where, how often, and which resources are GPUs."""

    pod_resources_socket: str
    pod_resources_interval_ms: int
    nvidia_resource_names: tuple[str, ...]


@dataclass(frozen=True)
class ApiSettings:
    """The API server watches: this node's name (empty: the hostname) and the credentials."""

    node_name: str
    kubeconfig: str
    kubeconfig_allow_exec: bool


@dataclass(frozen=True)
class WorkloadSettings:
    """What a pod's metadata adds to its ``Workload``: the team and the allowlisted pod labels."""

    team_label_sources: tuple[TeamSource, ...]
    kubernetes_enable_pod_labels: bool
    kubernetes_pod_label_allowlist_regex: tuple[str, ...]


@dataclass(frozen=True)
class ProcessSettings:
    """Process attribution: on (for the memory join, or for the per-process series) and where /proc is."""

    process_attribution: bool
    process_metrics: bool
    proc_root: str

    @property
    def enabled(self) -> bool:
        """The per-process series need the process join too."""
        return self.process_attribution or self.process_metrics


@dataclass(frozen=True)
class SeriesSettings:
    """The five settings the series read: the label spellings (``-o``), pod_uid, the DRA labels,
    virtual-GPU repeats and the per-process series."""

    use_old_namespace: bool
    kubernetes_enable_pod_uid: bool
    kubernetes_enable_dra: bool
    kubernetes_virtual_gpus: bool
    process_metrics: bool


@dataclass(frozen=True)
class KubernetesSettings:
    """The settings of the Kubernetes attribution (see the flags of the same names in ``--help``): the
    facade's own few, and one group for each component it builds."""

    kubernetes: bool
    kubernetes_gpu_id_type: str
    kubernetes_enable_dra: bool
    kubernetes_dra_driver_names: tuple[str, ...]
    peak_window_ms: int
    kubelet: KubeletSettings
    api: ApiSettings
    workloads: WorkloadSettings
    processes: ProcessSettings
    series: SeriesSettings

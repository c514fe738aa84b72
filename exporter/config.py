"""Configuration: command-line flags, environment variables and an optional YAML file.

Every setting is declared once, as a field of ``Config`` (``exporter.options.setting``): its name,
type and default, and its flags, environment variable and help text. ``OPTIONS`` is read back from
those fields, and the same declaration drives argparse, the environment lookup and the YAML keys, so
the sources can never disagree about names, types or defaults. Precedence is flags > environment >
YAML file > defaults. Components never take the whole ``Config``: the composition root
(``exporter.composition``) gives each its own small settings.

Names follow dcgm-exporter wherever the concept is the same (``-f/--collectors`` with
``DCGM_EXPORTER_COLLECTORS`` and so on), so an existing dcgm-exporter DaemonSet keeps working
when only the image changes. Settings that dcgm-exporter does not have use the
``GPU_POD_EXPORTER_`` environment prefix.

A bad value never produces a traceback: it raises ``ConfigError`` naming the source (flag,
environment variable or ``file:line``) and the key, and the command line turns that into one line
on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml

from exporter import safeyaml
from exporter.metrics.selection import CHIP_SERIES_LAYOUTS, CHIP_SERIES_PER_INSTANCE, DeviceSelection, parse_devices
from exporter.metrics.selection import DEFAULT as ALL_DEVICES
from exporter.options import (
    MAX_INTERVAL_MS,
    ConfigError,
    ConfigMapRef,
    Option,
    TeamSource,
    choice,
    convert,
    declared_options,
    parse_address,
    parse_bool,
    parse_configmap,
    parse_dra_drivers,
    parse_duration_s,
    parse_list,
    parse_regex_list,
    parse_retention_age,
    parse_str,
    parse_team_sources,
    positive_int,
    setting,
)
from exporter.upstream_config import load_upstream_config

__all__ = ["MAX_INTERVAL_MS", "Config", "ConfigError", "Option", "TeamSource", "load_config"]
from exporter.tools import tools_help

EXIT_CONFIG_ERROR = 2
PROGRAM = "gpu-pod-exporter"
SIMULATE_DEFAULT = "default"
CONFIG_FILE_ENV = "DCGM_EXPORTER_CONFIG_FILE"  # --config-file's variable (dcgm-exporter's name, 4.8.3 on)


COMPAT_AUTO = "auto"
COMPAT_4_8_2 = "4.8.2"
COMPAT_4_8_3 = "4.8.3"
# Every dcgm-exporter release of the corpus (upstream/dcgm-exporter/, one file per release), by its
# exporter version; tests/upstream checks this list against the corpus, so a release added there must
# be added here. The newest is what "auto" matches: upstream's current behaviour.
COMPAT_RELEASES = {"4.8.0": "4.5.1-4.8.0", "4.8.1": "4.5.2-4.8.1", "4.8.2": "4.5.3-4.8.2", "4.8.3": "4.6.0-4.8.3",
                   "4.8.4": "4.6.1-4.8.4"}
COMPAT_NEWEST = "4.8.4"
NEWEST_KNOWN_RELEASE = COMPAT_RELEASES[COMPAT_NEWEST]
# Where the migration guide says what to do with a dcgm-exporter newer than this list.
NEWER_RELEASE_GUIDE = "docs/migrate-from-dcgm-exporter.md#a-dcgm-exporter-release-newer-than-this-guide"


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def hostname_label(compat: str) -> str:
    """The node label's spelling: ``Hostname`` up to dcgm-exporter 4.8.2, ``hostname`` from 4.8.3 (PR 655)."""
    if compat == COMPAT_AUTO:
        compat = COMPAT_NEWEST
    return "hostname" if _release_key(compat) >= _release_key(COMPAT_4_8_3) else "Hostname"


@dataclass(frozen=True)
class Config:
    """The effective settings, each declared once here. Immutable: nothing changes it after ``resolve``.

    Loaded by ``load_config`` (flags > environment > file > defaults), then completed once by
    ``exporter.composition.resolve`` before anything is wired (a simulated node's endpoints, implied settings).
    """

    collectors: str = setting(
        ("-f", "--collectors"), "DCGM_EXPORTER_COLLECTORS",
        parse_str, "",
        "Counters CSV in dcgm-exporter's format (default: the built-in default-counters.csv).")
    address: str = setting(
        ("-a", "--address"), "DCGM_EXPORTER_LISTEN",
        parse_address, ":9400",
        "Address to listen on: [host]:port.")
    collect_interval_ms: int = setting(
        ("-c", "--collect-interval"), "DCGM_EXPORTER_INTERVAL",
        positive_int(100, "milliseconds"), 1000,
        "NVML sampling interval in milliseconds (one sampling thread for all GPUs).")
    kubernetes: bool = setting(
        ("-k", "--kubernetes"), "DCGM_EXPORTER_KUBERNETES",
        parse_bool, False,
        "Attribute GPUs to pods through the kubelet PodResources API.",
        is_switch=True)
    kubernetes_gpu_id_type: str = setting(
        ("--kubernetes-gpu-id-type",), "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        choice("uid", "device-name"), "uid",
        "How the device plugin names GPUs: uid (GPU-<uuid>, NVIDIA plugin) or device-name (nvidia<N>, GKE).")
    pod_resources_socket: str = setting(
        ("--pod-resources-kubelet-socket",), "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        parse_str, "/var/lib/kubelet/pod-resources/kubelet.sock",
        "Path of the kubelet PodResources socket.")
    pod_resources_interval_ms: int = setting(
        ("--pod-resources-interval",), "GPU_POD_EXPORTER_POD_RESOURCES_INTERVAL",
        positive_int(1000, "milliseconds"), 10000,
        "How often to call the kubelet's List (milliseconds); never per scrape.")
    kubernetes_enable_pod_labels: bool = setting(
        ("--kubernetes-enable-pod-labels",), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        parse_bool, False,
        "Copy allowlisted pod labels onto GPU series.",
        is_switch=True)
    kubernetes_pod_label_allowlist_regex: tuple[str, ...] = setting(
        ("--kubernetes-pod-label-allowlist-regex",), "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        parse_regex_list, (),
        "Comma-separated regular expressions on pod label keys to copy (empty: none unless pod labels "
        "are enabled, then all, bounded).")
    kubernetes_enable_pod_uid: bool = setting(
        ("--kubernetes-enable-pod-uid",), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        parse_bool, False,
        "Add the pod_uid label to attributed series.",
        is_switch=True)
    kubernetes_virtual_gpus: bool = setting(
        ("--kubernetes-virtual-gpus",), "KUBERNETES_VIRTUAL_GPUS",
        parse_bool, False,
        "Repeat shared-GPU series once per sharing pod with a vgpu label, and give GPU_UTIL and FB_USED per pod "
        "from its processes beside the device series (dcgm-exporter's mode; reads the process lists).",
        is_switch=True)
    nvidia_resource_names: tuple[str, ...] = setting(
        ("--nvidia-resource-names",), "NVIDIA_RESOURCE_NAMES",
        parse_list, (),
        "Extra comma-separated extended-resource names that carry NVIDIA GPUs.")
    kubernetes_enable_dra: bool = setting(
        ("--kubernetes-enable-dra",), "KUBERNETES_ENABLE_DRA",
        parse_bool, False,
        "Attribute GPUs and MIG devices allocated through Dynamic Resource Allocation (the kubelet's "
        "dynamic_resources, resolved through this node's ResourceSlices) and add dcgm-exporter's dra_* labels.",
        is_switch=True)
    kubernetes_dra_driver_names: tuple[str, ...] = setting(
        ("--kubernetes-dra-driver-names",), "GPU_POD_EXPORTER_KUBERNETES_DRA_DRIVER_NAMES",
        parse_dra_drivers, ("gpu.nvidia.com",),
        "Comma-separated DRA driver names whose devices are NVIDIA GPUs (with --kubernetes-enable-dra).")
    configmap_data: ConfigMapRef | None = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        ("-m", "--configmap-data"), "DCGM_EXPORTER_CONFIGMAP_DATA",
        parse_configmap, None,
        "Read the counters CSV from key 'metrics' of this ConfigMap (<namespace>:<name>) through the API "
        "server instead of --collectors; re-read in the background.")
    configmap_interval_ms: int = setting(
        ("--configmap-refresh-interval",), "GPU_POD_EXPORTER_CONFIGMAP_REFRESH_INTERVAL",
        positive_int(1000, "milliseconds"), 60000,
        "How often to re-read the --configmap-data ConfigMap (milliseconds); never per scrape.")
    hpc_job_mapping_dir: str = setting(
        ("--hpc-job-mapping-dir",), "DCGM_HPC_JOB_MAPPING_DIR",
        parse_str, "",
        "Directory of files named <gpu> or <gpu>.<gpu-instance> holding job ids (one per line): "
        "adds an hpc_job label (bare-metal schedulers such as Slurm).")
    hpc_job_mapping_interval_ms: int = setting(
        ("--hpc-job-mapping-interval",), "GPU_POD_EXPORTER_HPC_JOB_MAPPING_INTERVAL",
        positive_int(100, "milliseconds"), 5000,
        "How often to re-read --hpc-job-mapping-dir (milliseconds); never per scrape.")
    kubeconfig: str = setting(
        ("--kubeconfig",), "KUBECONFIG",
        parse_str, "",
        "kubeconfig file for the API server (default: in-cluster service account).")
    kubeconfig_allow_exec: bool = setting(
        ("--kubeconfig-allow-exec",), "GPU_POD_EXPORTER_KUBECONFIG_ALLOW_EXEC",
        parse_bool, False,
        "Let a kubeconfig's exec credential plugin or auth-provider run (it starts a program); off: refused.",
        is_switch=True)
    team_label_sources: tuple[TeamSource, ...] = setting(
        ("--kubernetes-team-label-sources",), "GPU_POD_EXPORTER_TEAM_LABEL_SOURCES",
        parse_team_sources, (TeamSource("pod", "team"), TeamSource("namespace", "team")),
        "Where the team label comes from, first match wins: pod:<key> or namespace:<key>.")
    process_attribution: bool = setting(
        ("--kubernetes-process-attribution",), "GPU_POD_EXPORTER_PROCESS_ATTRIBUTION",
        parse_bool, False,
        "Attribute GPU memory and utilization per container from NVML's process list, its per-process "
        "utilization samples and /proc/<pid>/cgroup (needs hostPID).",
        is_switch=True)
    process_metrics: bool = setting(
        ("--kubernetes-process-metrics",), "GPU_POD_EXPORTER_PROCESS_METRICS",
        parse_bool, False,
        "Also export one series per GPU process (pid label); opt-in, high cardinality.",
        is_switch=True)
    process_interval_ms: int = setting(
        ("--process-interval",), "GPU_POD_EXPORTER_PROCESS_INTERVAL",
        positive_int(1000, "milliseconds"), 5000,
        "How often to read NVML's process lists and per-process utilization (milliseconds); the lists "
        "cost ~4.5 ms per GPU on a real driver.")
    proc_root: str = setting(
        ("--proc-root",), "GPU_POD_EXPORTER_PROC_ROOT",
        parse_str, "/proc",
        "Where the host's /proc is mounted (for PID -> cgroup -> pod).")
    xid_count_window_ms: int = setting(
        ("-x", "--xid-count-window-size"), "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        positive_int(1000, "milliseconds"), 300000,
        "Window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds.")
    clock_events_window_ms: int = setting(
        ("--clock-events-count-window-size",), "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        positive_int(1000, "milliseconds"), 300000,
        "Window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds.")
    peak_window_ms: int = setting(
        ("--peak-window",), "GPU_POD_EXPORTER_PEAK_WINDOW",
        positive_int(1000, "milliseconds"), 60000,
        "Trailing window of the DCGM_EXP_*_PEAK series in milliseconds (framebuffer used, utilization, power, "
        "temperature): the highest sample within it. At least the scrape interval, so no spike falls between "
        "two scrapes.")
    web_config_file: str = setting(
        ("--web-config-file",), "DCGM_EXPORTER_WEB_CONFIG_FILE",
        parse_str, "",
        "Prometheus exporter-toolkit web config (TLS, mTLS, basic auth, headers).")
    web_systemd_socket: bool = setting(
        ("--web-systemd-socket",), "DCGM_EXPORTER_SYSTEMD_SOCKET",
        parse_bool, False,
        "Serve on the socket systemd passes (socket activation, LISTEN_FDS) instead of binding --address.",
        is_switch=True)
    web_max_requests: int = setting(
        ("--web-max-requests",), "GPU_POD_EXPORTER_WEB_MAX_REQUESTS",
        positive_int(1, "requests", 1_000_000), 32,
        "Accepted for compatibility with gpu-pod-exporter 0.1 manifests; no effect (see --web-max-connections).",
        no_effect="the event-loop server has no worker pool; --web-max-connections bounds open connections")
    web_max_connections: int = setting(
        ("--web-max-connections",), "GPU_POD_EXPORTER_WEB_MAX_CONNECTIONS",
        positive_int(16, "connections", 1_000_000), 1024,
        "Open client connections at most; at the cap the oldest one that has not sent a request is closed.")
    web_read_timeout_s: float = setting(
        ("--web-read-timeout",), "DCGM_EXPORTER_WEB_READ_TIMEOUT",
        parse_duration_s, 5.0,
        "dcgm-exporter 4.8.3's read timeout (Go duration, e.g. 10s): the time a client has to send its "
        "request head (and TLS handshake).")
    web_write_timeout_s: float = setting(
        ("--web-write-timeout",), "DCGM_EXPORTER_WEB_WRITE_TIMEOUT",
        parse_duration_s, 30.0,
        "dcgm-exporter 4.8.3's write timeout (Go duration, e.g. 30s): the time a client has to read "
        "the whole response; keep Prometheus's scrape_timeout below it.")
    container_labels: bool = setting(
        ("--container-labels",), "DCGM_EXPORTER_CONTAINER_LABELS",
        parse_bool, False,
        "dcgm-exporter 4.8.3's container label for non-Kubernetes containers (accepted; not supported here).",
        is_switch=True,
        no_effect="the container label for containers outside Kubernetes (Docker Engine API) is not "
        "supported here; GPUs of Kubernetes pods get container/namespace/pod with -k")
    container_runtime_socket: str = setting(
        ("--container-runtime-socket",), "DCGM_CONTAINER_RUNTIME_SOCKET",
        parse_str, "",
        "dcgm-exporter 4.8.3's Docker-compatible runtime socket (accepted; not supported here).",
        no_effect="the container runtime API is not read here (see --container-labels)")
    # dcgm-exporter 4.6.1-4.8.4's flags (its DCGM field-watch retention, scrape concurrency, Go runtime
    # metrics and a stricter /health): accepted, each with the line that says how this exporter does it.
    max_concurrent_scrapes: int = setting(
        ("--max-concurrent-scrapes",), "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES",
        positive_int(1, "scrapes", 1_000_000), 16,
        "dcgm-exporter 4.8.4's limit on scrapes rendered at once (accepted; scrapes here serve cached bytes).",
        no_effect="a scrape here sends the exposition rendered once per sampling cycle, so concurrent scrapes "
        "cost no rendering; --web-max-connections bounds the open connections instead")
    enable_exporter_metrics: bool = setting(
        ("--enable-exporter-metrics",), "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",
        parse_bool, False,
        "dcgm-exporter 4.8.4's go_*/process_*/promhttp_* metrics (accepted; this exporter's own metrics are "
        "the gpu_pod_exporter_* families, always served).",
        is_switch=True,
        no_effect="there is no Go runtime whose go_*/promhttp_* metrics could be served; this exporter's own "
        "health, timing and API metrics (gpu_pod_exporter_*) are always served")
    watch_max_keep_age: str = setting(
        ("--watch-max-keep-age",), "DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",
        parse_retention_age, "",
        "dcgm-exporter 4.8.4's DCGM field-watch history age (accepted; there is no DCGM watch here).",
        no_effect="there is no DCGM field-watch history: every sampling cycle reads NVML directly; the Xid "
        "and clock-event windows are --xid-count-window-size and --clock-events-count-window-size, "
        "the peaks' --peak-window")
    watch_max_keep_samples: int = setting(
        ("--watch-max-keep-samples",), "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES",
        positive_int(0, "samples", 1_000_000_000), 0,
        "dcgm-exporter 4.8.4's DCGM field-watch history length (accepted; there is no DCGM watch here).",
        no_effect="there is no DCGM field-watch history (see --watch-max-keep-age)")
    health_require_gpus: bool = setting(
        ("--health-require-gpus",), "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS",
        parse_bool, False,
        "dcgm-exporter's /health 503 when it sees no GPU (always so here).",
        is_switch=True,
        no_effect="/health here is 503 whenever NVML is down, no GPU is found or the sample is stale, "
        "with or without this flag")
    dcgm_exporter_compat: str = setting(
        ("--dcgm-exporter-compat",), "GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT",
        choice(COMPAT_AUTO, *COMPAT_RELEASES), COMPAT_AUTO,
        "Which dcgm-exporter release to match where releases differ (the node label: Hostname up to 4.8.2, "
        f"hostname from 4.8.3): {', '.join(COMPAT_RELEASES)}; auto: the newest, {COMPAT_NEWEST}.")
    node_name: str = setting(
        ("--node-name",), "NODE_NAME",
        parse_str, "",
        "Node name for the node label (hostname, or Hostname up to dcgm-exporter 4.8.2) and the pod watch "
        "(default: this machine's hostname).")
    no_hostname: bool = setting(
        ("-n", "--no-hostname"), "DCGM_EXPORTER_NO_HOSTNAME",
        parse_bool, False,
        "Omit the node label (hostname, or Hostname up to dcgm-exporter 4.8.2).",
        is_switch=True)
    devices: DeviceSelection = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        ("-d", "--devices"), "DCGM_EXPORTER_DEVICES_STR",
        parse_devices, ALL_DEVICES,
        "Which GPUs / MIG GPU instances the CSV rows are reported for: f, g[:ids], i[:ids], g+i (ids like "
        "0,2-4), as dcgm-exporter; default: as --mig-chip-series says.")
    mig_chip_series: str = setting(
        ("--mig-chip-series",), "GPU_POD_EXPORTER_MIG_CHIP_SERIES",
        choice(*CHIP_SERIES_LAYOUTS), CHIP_SERIES_PER_INSTANCE,
        "Without -d, where a MIG-enabled GPU's chip-wide readings (temperature, power, energy, clocks) go: "
        "per-instance repeats them on every GPU instance's series with its GPU_I_* and pod labels, as "
        "dcgm-exporter (-d f); once puts them on one series per GPU without GPU_I_* or pod labels.")
    use_old_namespace: bool = setting(
        ("-o", "--use-old-namespace"), "DCGM_EXPORTER_USE_OLD_NAMESPACE",
        parse_bool, False,
        "dcgm-exporter 1.x label names: uuid, pod_name, pod_namespace, container_name.",
        is_switch=True)
    remote_hostengine_info: str = setting(
        ("-r", "--remote-hostengine-info"), "DCGM_REMOTE_HOSTENGINE_INFO",
        parse_str, "",
        "dcgm-exporter's nv-hostengine address (accepted; no effect here).",
        no_effect="there is no DCGM host engine: this exporter reads the GPUs of its own node through NVML")
    switch_devices: str = setting(
        ("-s", "--switch-devices"), "DCGM_EXPORTER_OTHER_DEVICES_STR",
        parse_str, "f",
        "dcgm-exporter's NvSwitch/NvLink selection (accepted; no effect here).",
        no_effect="NvSwitch and NvLink entities are not exported (GPU NvLink counters are CSV rows)")
    cpu_devices: str = setting(
        ("-p", "--cpu-devices"), "DCGM_EXPORTER_CPU_DEVICES_STR",
        parse_str, "f",
        "dcgm-exporter's Grace CPU selection (accepted; no effect here).",
        no_effect="CPU and CPU-core entities are not exported (they come from DCGM, not NVML)")
    fake_gpus: bool = setting(
        ("--fake-gpus",), "DCGM_EXPORTER_USE_FAKE_GPUS",
        parse_bool, False,
        "dcgm-exporter's fake GPUs (accepted; no effect here: use --simulate).",
        is_switch=True,
        no_effect="DCGM fake GPUs do not exist here; run with --simulate for simulated GPUs, kubelet and "
        "API server")
    enable_dcgm_log: bool = setting(
        ("--enable-dcgm-log",), "DCGM_EXPORTER_ENABLE_DCGM_LOG",
        parse_bool, False,
        "dcgm-exporter's DCGM log capture (accepted; no effect here).",
        is_switch=True,
        no_effect="there is no DCGM library whose log could be captured; --debug logs this exporter's detail")
    dcgm_log_level: str = setting(
        ("--dcgm-log-level",), "DCGM_EXPORTER_DCGM_LOG_LEVEL",
        parse_str, "NONE",
        "dcgm-exporter's DCGM log level (accepted; no effect here).",
        no_effect="there is no DCGM library whose log level could be set; --debug logs this exporter's detail")
    dump_enabled: bool = setting(
        ("--dump-enabled",), "DCGM_EXPORTER_DUMP_ENABLED",
        parse_bool, False,
        "dcgm-exporter's debug dumps (accepted; no effect here).",
        is_switch=True,
        no_effect="debug dumps of DCGM objects are not written; /metrics, /health and --debug logs show the "
        "state")
    dump_directory: str = setting(
        ("--dump-directory",), "DCGM_EXPORTER_DUMP_DIRECTORY",
        parse_str, "",
        "dcgm-exporter's debug dump directory (accepted; no effect here).",
        no_effect="debug dumps are not written")
    dump_retention: int = setting(
        ("--dump-retention",), "DCGM_EXPORTER_DUMP_RETENTION",
        positive_int(0, "hours"), 24,
        "dcgm-exporter's debug dump retention in hours (accepted; no effect here).",
        no_effect="debug dumps are not written")
    dump_compression: bool = setting(
        ("--dump-compression",), "DCGM_EXPORTER_DUMP_COMPRESSION",
        parse_bool, True,
        "dcgm-exporter's debug dump compression (accepted; no effect here).",
        is_switch=True,
        no_effect="debug dumps are not written")
    disable_startup_validate: bool = setting(
        ("--disable-startup-validate",), "DISABLE_STARTUP_VALIDATE",
        parse_bool, False,
        "dcgm-exporter's libdcgm check (accepted; no effect here).",
        is_switch=True,
        no_effect="there is no libdcgm to validate; NVML problems show on /health instead of stopping the start")
    enable_gpu_bind_unbind_watch: bool = setting(
        ("--enable-gpu-bind-unbind-watch",), "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
        parse_bool, False,
        "dcgm-exporter's GPU bind/unbind watch (accepted; no effect here).",
        is_switch=True,
        no_effect="a GPU that disappears is reported lost and re-probed, and NVML is re-initialised when it "
        "stops working, without a watch")
    gpu_bind_unbind_poll_interval: str = setting(
        ("--gpu-bind-unbind-poll-interval",), "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        parse_str, "1s",
        "dcgm-exporter's bind/unbind poll interval (accepted; no effect here).",
        no_effect="there is no bind/unbind watch to poll")
    enable_pprof: bool = setting(
        ("--enable-pprof",), "DCGM_EXPORTER_ENABLE_PPROF",
        parse_bool, False,
        "dcgm-exporter's Go profiler endpoints (accepted; no effect here).",
        is_switch=True,
        no_effect="there is no Go runtime to profile; bench/ has this exporter's profiling harness")
    replace_blanks_in_model_name: bool = setting(
        ("-rbmn", "--replace-blanks-in-model-name"), "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
        parse_bool, False,
        "Replace spaces in the modelName label with '-'.",
        is_switch=True)
    log_format: str = setting(
        ("--log-format",), "DCGM_EXPORTER_LOG_FORMAT",
        choice("text", "json"), "text",
        "Log line format: text or json.")
    debug: bool = setting(
        ("--debug",), "DCGM_EXPORTER_DEBUG",
        parse_bool, False,
        "Log at debug level.",
        is_switch=True)
    simulate: str = setting(
        ("--simulate",), "GPU_POD_EXPORTER_SIMULATE",
        parse_str, "",
        "Run on simulated GPUs (and a simulated kubelet and API server): 'default' or a scenario YAML file.")
    config_file: str = ""
    # dcgm-exporter's --config-file ``metrics.fields``: the counters as CSV text, and where they came from.
    inline_counters: str = ""
    inline_counters_source: str = ""
    # One line each, logged at start: what a dcgm-exporter YAML config asked for that works differently here.
    notes: tuple[str, ...] = field(default=(), compare=False)
    # Where each non-default value came from ("flag --x", "environment variable X", "file.yaml:3").
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def collect_interval_s(self) -> float:
        return self.collect_interval_ms / 1000.0

    @property
    def hostname_label(self) -> str:
        return hostname_label(self.dcgm_exporter_compat)

    @property
    def compat_note(self) -> str:
        """Why this generation, when "auto" chose it (one start-up line); empty when the user chose."""
        where = self.sources.get("dcgm_exporter_compat", "")
        return f"dcgm-exporter {self.dcgm_exporter_compat} behaviour ({where}): the node label is " \
               f"{self.hostname_label}" if where.startswith("auto") else ""

    def no_effect_warnings(self) -> list[str]:
        """One line per accepted flag that was set but means nothing here (DCGM-only, or retired)."""
        lines = []
        for option in OPTIONS:
            if option.no_effect and option.attr in self.sources and getattr(self, option.attr) != option.default:
                source = self.sources[option.attr]
                named = source if source == f"flag {option.long_flag}" else f"{source} ({option.long_flag})"
                lines.append(f"{named} is accepted for compatibility but has no effect here: {option.no_effect}")
        return lines

    def default_differences(self) -> list[str]:
        """One line per default that differs from dcgm-exporter's and was left to its default (logged at start)."""
        return [f"{option.long_flag} not given: {text}" for attr, text in UPSTREAM_DEFAULT_DIFFERENCES.items()
                if attr not in self.sources and (option := _BY_ATTR[attr])]

    def source_of(self, attr: str) -> str:
        """Where a setting came from, for error messages about its value (e.g. a missing file)."""
        option = _BY_ATTR.get(attr)
        default = f"default of --{option.yaml_key}" if option else attr
        return self.sources.get(attr, default)


OPTIONS: tuple[Option, ...] = declared_options(Config)
_BY_ATTR = {option.attr: option for option in OPTIONS}

# Defaults that differ from dcgm-exporter's, each said once at start when left to its default
# (docs/migrate-from-dcgm-exporter.md has the reasons).
UPSTREAM_DEFAULT_DIFFERENCES = {
    "collect_interval_ms": "sampling every 1000 ms; dcgm-exporter's default is 30000 ms (-c 30000 for its cadence)",
}
_BY_YAML_KEY = {option.yaml_key: option for option in OPTIONS}





def with_implied_settings(config: Config) -> Config:
    """``config`` with the settings its others imply; part of the one resolve step (``exporter.composition.resolve``).

    With ``-k``, ``--kubernetes-process-metrics`` and ``--kubernetes-virtual-gpus`` (each pod's own
    GPU_UTIL and FB_USED) are computed from NVML's process lists, so they turn on reading them
    (``process_attribution``), whichever source asked for them.
    """
    if config.kubernetes and (config.process_metrics or config.kubernetes_virtual_gpus):
        return dataclasses.replace(config, process_attribution=True)
    return config


# ---------------------------------------------------------------------------------------------
# Loading.


class _OneLineArgumentParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; users asked for one clear line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            message += (f": not a flag of this exporter nor of dcgm-exporter up to {NEWEST_KNOWN_RELEASE} "
                        f"(every one of those is accepted); a newer release's flag? see {NEWER_RELEASE_GUIDE}")
        raise ConfigError("command line", "arguments", message)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineArgumentParser(
        prog=PROGRAM,
        description="Prometheus exporter for NVIDIA GPUs with DCGM-compatible metrics and pod attribution.",
        epilog="Every flag also reads the environment variable shown; flags win over the environment,\n"
        "which wins over --config-file.\n\n" + tools_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the tools' table keeps its lines
        argument_default=argparse.SUPPRESS,
    )
    # -v as well: urfave/cli, which parses dcgm-exporter's command line, gives every app --version/-v.
    parser.add_argument("-v", "--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--config-file", dest="config_file", metavar="PATH",
                        help="YAML file whose keys are the long flag names, e.g. 'collect-interval: 2000', or "
                        "dcgm-exporter's config file (version 1 or 2) "
                        f"[env {CONFIG_FILE_ENV}]")
    for option in OPTIONS:
        env_note = f" [env {option.env}]" if option.env else ""
        default_note = f" (default: {_describe_default(option)})"
        if option.attr == "simulate":
            parser.add_argument(*option.flags, dest=option.attr, nargs="?", const=SIMULATE_DEFAULT,
                                metavar="SCENARIO", help=option.help + env_note)
        elif option.is_switch:
            parser.add_argument(*option.flags, dest=option.attr, nargs="?", const="true", metavar="BOOL",
                                help=option.help + env_note + default_note)
        elif isinstance(option.default, tuple):  # dcgm-exporter's StringSliceFlags: repeats accumulate
            parser.add_argument(*option.flags, dest=option.attr, action="append", metavar=_metavar(option),
                                help=option.help + " Repeatable." + env_note + default_note)
        else:
            parser.add_argument(*option.flags, dest=option.attr, metavar=_metavar(option),
                                help=option.help + env_note + default_note)
    return parser


def go_style_arguments(argv: Sequence[str]) -> list[str]:
    """Rewrite Go's single-dash long flags (``-collectors FILE``, ``-kubernetes``) to ``--collectors``.

    dcgm-exporter parses its command line with Go's flag syntax, where ``-name`` and ``--name`` are
    the same flag; argparse would read ``-kubernetes`` as ``-k ubernetes``. A token is rewritten only
    when it is not itself a declared flag (``-rbmn`` stays) and ``--name`` is one; the value that
    follows a flag taking a value, and everything after ``--``, is left alone.
    """
    takes_value = {"--config-file"}
    declared = {"--config-file", "--version", "-v", "-h", "--help"}
    for option in OPTIONS:
        declared.update(option.flags)
        if not option.is_switch and option.attr != "simulate":
            takes_value.update(option.flags)
    result: list[str] = []
    value_next = False
    for index, given in enumerate(argv):
        if given == "--":
            return result + list(argv[index:])
        if value_next:  # Go takes the next word as the value, even "-x"; argparse needs --flag=-x for that
            if given.startswith("-"):
                result[-1] = f"{result[-1]}={given}"
            else:
                result.append(given)
            value_next = False
            continue
        name, eq, value = given.partition("=")
        if name.startswith("-") and not name.startswith("--") and name not in declared and f"-{name}" in declared:
            name = f"-{name}"
        value_next = name in takes_value and not eq and (len(name) == 2 or name.startswith("--"))
        result.append(name + eq + value)
    return result


def _metavar(option: Option) -> str:
    return option.yaml_key.split("-")[-1].upper()


def _describe_default(option: Option) -> str:
    value = option.default
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):  # a Go duration, in seconds
        return f"{value:g}s"
    return str(value) if value not in ("", None) else "none"


def _version() -> str:
    from exporter import __version__  # noqa: PLC0415 - avoid an import cycle at module load

    return __version__


def load_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """Resolve the effective configuration; raises ``ConfigError`` on any bad input."""
    env = os.environ if environ is None else environ
    parsed = vars(build_parser().parse_args(go_style_arguments(argv)))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    config_file = parsed.pop("config_file", None) or env.get(CONFIG_FILE_ENV, "")
    extra: dict[str, Any] = {}
    if config_file:
        loaded = _load_yaml(config_file)
        for attr, (value, where) in loaded.items():
            if attr in _BY_ATTR:
                values[attr] = value
                sources[attr] = where
            else:
                extra[attr] = value

    for option in OPTIONS:
        if option.env and option.env in env:
            where = f"environment variable {option.env}"
            values[option.attr] = convert(option, env[option.env], where)
            sources[option.attr] = where

    for attr, given in parsed.items():
        option = _BY_ATTR[attr]
        where = f"flag {option.long_flag}"
        # a repeatable flag: every occurrence counts, each comma-separated
        raw = ",".join(given) if isinstance(given, list) else given
        values[attr] = convert(option, raw, where)
        sources[attr] = where

    unknown = unknown_upstream_variables(env)
    if unknown:
        extra["notes"] = (*extra.get("notes", ()), *unknown)
    upstream_file = bool(extra.pop("upstream_format", False))
    if values.get("dcgm_exporter_compat", COMPAT_AUTO) == COMPAT_AUTO:
        values["dcgm_exporter_compat"], sources["dcgm_exporter_compat"] = _auto_compat(sources, upstream_file)
    if "collectors" in values and "inline_counters" in extra:
        extra.pop("inline_counters")  # a flag or variable naming a CSV wins over the file's metrics.fields
        extra.pop("inline_counters_source")
    return Config(config_file=config_file, sources=sources, **values, **extra)


def unknown_upstream_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``DCGM_EXPORTER_*`` variable that no dcgm-exporter release known here reads.

    Unknown flags stop the start (exit 2, naming the newest release known); an unknown variable cannot
    stop anything (the environment holds whatever the pod spec sets), so it is named instead: a
    variable of a newer dcgm-exporter would otherwise be dropped without a word.
    """
    known = {option.env for option in OPTIONS if option.env} | {CONFIG_FILE_ENV}
    return [f"environment variable {name} is not read by this exporter and is not a variable of dcgm-exporter up "
            f"to {NEWEST_KNOWN_RELEASE}; a newer release's? see {NEWER_RELEASE_GUIDE}"
            for name in sorted(environ) if name.startswith("DCGM_EXPORTER_") and name not in known]


def _auto_compat(sources: Mapping[str, str], upstream_file: bool) -> tuple[str, str]:
    """--dcgm-exporter-compat auto: the newest release known here, which is what upstream ships today.

    A process cannot see which image it replaced, and dcgm-exporter's example DaemonSets of 4.8.2 and
    4.8.4 set the same three variables, so no setting tells an older generation apart; the chart,
    which does see dcgm-exporter's image tag in a values file, passes that release instead.
    """
    del sources, upstream_file
    return COMPAT_NEWEST, (f"auto: the newest dcgm-exporter release known here ({NEWEST_KNOWN_RELEASE}); "
                           "--dcgm-exporter-compat=4.8.2 keeps the Hostname label of 4.8.2 and earlier")





def _load_yaml(path: str) -> dict[str, tuple[Any, str]]:
    """Read the YAML config file keeping each key's line number for error messages.

    The file goes through ``exporter.inputfile`` (a regular file, at most 1 MiB, UTF-8) and
    ``exporter.safeyaml`` (bounded nesting, no aliases, standard tags only, errors that never quote
    the file). A key given twice is an error, as in the web config and the scenario format.
    """
    root = safeyaml.YamlFile(path, ConfigError.at, key_lines=True, document_key="yaml").load("config-file")
    if root is None:
        return {}
    if not root.is_mapping():
        raise root.error("expected a mapping of option: value")
    if any(isinstance(key, yaml.ScalarNode) and key.value == "version" for key, _value in root.node.value):
        return load_upstream_config(root, _BY_ATTR)

    result: dict[str, tuple[Any, str]] = {}
    for key, value in root.mapping().items():
        where = f"{path}:{value.line}"
        option = _BY_YAML_KEY.get(key)
        if option is None:
            raise ConfigError(where, _shown_key(key), _unknown_key_message(key))
        raw = value.value()
        if raw is None:
            raise value.error("empty value: give a value or remove the key")
        result[option.attr] = (convert(option, raw, where), where)
    return result


def _unknown_key_message(key: str) -> str:
    """One line even with 60 options: the closest names, not the whole list (``--help`` has it)."""
    return safeyaml.unknown_key(key, _BY_YAML_KEY,
                                "the keys are the long flag names without '--'; see --help for all of them")


def _shown_key(key: str) -> str:
    return key if len(key) <= 60 else key[:57] + "..."

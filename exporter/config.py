"""Configuration: command-line flags, environment variables and an optional YAML file.

Every setting is declared once in ``OPTIONS``. The same declaration drives argparse, the
environment lookup and the YAML keys, so the three sources can never disagree about names,
types or defaults. Precedence is flags > environment > YAML file > defaults.

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
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Self

import yaml

from exporter import safeyaml
from exporter.metrics.selection import CHIP_SERIES_LAYOUTS, CHIP_SERIES_PER_INSTANCE, DeviceSelection, parse_devices
from exporter.metrics.selection import DEFAULT as ALL_DEVICES
from exporter.tools import tools_help
from exporter.units import parse_go_duration

EXIT_CONFIG_ERROR = 2
PROGRAM = "gpu-pod-exporter"
SIMULATE_DEFAULT = "default"
CONFIG_FILE_ENV = "DCGM_EXPORTER_CONFIG_FILE"  # --config-file's variable (dcgm-exporter's name, 4.8.3 on)


class ConfigError(Exception):
    """A user mistake in configuration; ``str(self)`` is the single line shown to the user."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        self.message = message
        # One line, whatever the input held: a key or value with a newline or control character in
        # it is shown escaped (it came from the user's file and is quoted back in the message).
        super().__init__(_one_line(f"{source}: {key}: {message}"))

    @classmethod
    def at(cls, file: str, line: int | None, key: str, message: str) -> Self:
        """The error at ``file:line`` (``safeyaml.YamlFile``'s error factory for every ConfigError kind)."""
        return cls(f"{file}:{line}" if line is not None else file, key, message)


def _one_line(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


# ---------------------------------------------------------------------------------------------
# Value parsers. Each takes the raw text (or YAML scalar) and returns the typed value, or raises
# ValueError with a message that says what was expected.


# Go's strconv.ParseBool spellings (1, t, T, TRUE, true, True and their false twins), which
# dcgm-exporter's urfave/cli applies to every DCGM_EXPORTER_* switch, plus yes/no/on/off (this
# exporter's own earlier manifests use them). Compared case-insensitively: a superset of Go's.
_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off", ""})


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"invalid boolean {_shown(raw)}: expected true or false (or Go's 1, t, T, 0, f, F)")


def _parse_go_duration(raw: object) -> float:
    """A Go ``time.Duration`` as dcgm-exporter's flags take it (``10s``, ``1m30s``, ``500ms``) -> seconds.

    Bounded to (0, 1 h]: a web timeout of zero would disable it (Go's meaning), which this server
    does not allow, and longer than an hour is a typo.
    """
    text = _parse_str(raw).strip()
    seconds = parse_go_duration(text)
    if not 0 < seconds <= 3600:
        raise ValueError(f"invalid duration {_shown(text)}: must be more than 0 and at most 1h")
    return seconds


def _parse_retention_age(raw: object) -> str:
    """dcgm-exporter 4.8.4's field-watch age: a Go duration, ``0`` (no age limit) included; kept as given."""
    text = _parse_str(raw).strip()
    if text not in ("0", "0s"):
        seconds = parse_go_duration(text)  # raises ValueError naming the text
        if seconds < 0:
            raise ValueError(f"invalid duration {_shown(text)}: must not be negative")
    return text


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


# Every interval and window has an upper bound: a value past what a timer can wait would end the
# thread that waits on it (``Event.wait`` raises OverflowError), and nobody means a day anyway.
MAX_INTERVAL_MS = 24 * 3600 * 1000
_MAX_INT_DIGITS = 30


def _shown(raw: object) -> str:
    """A user's value as quoted in an error: at most 40 characters of it."""
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _positive_int(minimum: int, unit: str, maximum: int = MAX_INTERVAL_MS) -> Callable[[object], int]:
    def parse(raw: object) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"invalid value {raw!r}: expected an integer number of {unit}")
        text = str(raw).strip()
        invalid = ValueError(f"invalid value {_shown(raw)}: expected an integer number of {unit} (at most {maximum})")
        if len(text) > _MAX_INT_DIGITS:  # int() of thousands of digits is slow or refused; no setting is that large
            raise invalid
        try:
            value = int(text)
        except ValueError:
            raise invalid from None
        if value < minimum:
            raise ValueError(f"invalid value {value}: must be at least {minimum} {unit}")
        if value > maximum:
            raise ValueError(f"invalid value {value}: must be at most {maximum} {unit}")
        return value

    return parse


def _parse_str(raw: object) -> str:
    if isinstance(raw, list | dict):
        raise ValueError(f"expected a string, got a {'list' if isinstance(raw, list) else 'mapping'}")
    return "" if raw is None else str(raw)


def _parse_list(raw: object) -> tuple[str, ...]:
    """Comma-separated text (flags, environment) or a YAML list."""
    if raw is None:
        return ()
    items = [str(item) for item in raw] if isinstance(raw, list) else str(raw).split(",")
    return tuple(item.strip() for item in items if item.strip())


def _choice(*choices: str) -> Callable[[object], str]:
    def parse(raw: object) -> str:
        text = _parse_str(raw).strip()
        if text not in choices:
            raise ValueError(f"invalid value {_shown(text)}: expected one of {', '.join(choices)}")
        return text

    return parse


_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$")


def _parse_address(raw: object) -> str:
    text = _parse_str(raw).strip()
    match = _ADDRESS.match(text)
    if not match or not 0 <= int(match.group("port")) <= 65535:
        raise ValueError(f"invalid listen address {_shown(text)}: expected [host]:port, e.g. :9400 or [::]:9400")
    return text


def _parse_regex_list(raw: object) -> tuple[str, ...]:
    patterns = _parse_list(raw)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return patterns


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_CONFIGMAP = re.compile(rf"^(?P<namespace>{_DNS_LABEL}):(?P<name>{_DNS_LABEL}(\.{_DNS_LABEL})*)$")


def _parse_configmap(raw: object) -> str:
    """dcgm-exporter's ``-m namespace:name``; its default ``none`` (and empty) means no ConfigMap."""
    text = _parse_str(raw).strip()
    if text in ("", "none"):
        return ""
    if not _CONFIGMAP.match(text) or len(text.partition(":")[2]) > 253:
        raise ValueError(f"invalid ConfigMap {text!r}: expected <namespace>:<name>, e.g. "
                         "gpu-monitoring:exporter-metrics-config-map")
    return text


_DRA_DRIVER = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")


def _parse_dra_drivers(raw: object) -> tuple[str, ...]:
    """DRA driver names: DNS subdomains (``gpu.nvidia.com``), as ResourceSlice ``spec.driver`` requires."""
    drivers = _parse_list(raw)
    if not drivers:
        raise ValueError("expected at least one DRA driver name, e.g. gpu.nvidia.com")
    for driver in drivers:
        if len(driver) > 63 or not _DRA_DRIVER.match(driver):
            raise ValueError(f"invalid DRA driver name {_shown(driver)}: expected a DNS subdomain such as "
                             "gpu.nvidia.com")
    return drivers


_TEAM_SOURCE = re.compile(r"^(pod|namespace):[A-Za-z0-9._/-]+$")


def _parse_team_sources(raw: object) -> tuple[str, ...]:
    sources = _parse_list(raw)
    for source in sources:
        if not _TEAM_SOURCE.match(source):
            raise ValueError(f"invalid label source {source!r}: expected pod:<label-key> or namespace:<label-key>")
    return sources


# ---------------------------------------------------------------------------------------------
# The declaration table.


@dataclass(frozen=True)
class Option:
    """One setting: how it is spelled on each source and how its value is parsed."""

    attr: str
    flags: tuple[str, ...]
    env: str | None
    parse: Callable[[object], Any]
    default: Any
    help: str
    is_switch: bool = False  # a flag that takes no value (``-k``) but accepts a value in env/YAML
    # dcgm-exporter flags that mean nothing without DCGM: accepted (an upstream command line must keep
    # working), and when set to anything but the default, one warning line at start says why.
    no_effect: str = ""

    @property
    def long_flag(self) -> str:
        return next(flag for flag in self.flags if flag.startswith("--"))

    @property
    def yaml_key(self) -> str:
        return self.long_flag[2:]


OPTIONS: tuple[Option, ...] = (
    Option("collectors", ("-f", "--collectors"), "DCGM_EXPORTER_COLLECTORS", _parse_str, "",
           "Counters CSV in dcgm-exporter's format (default: the built-in default-counters.csv)."),
    Option("address", ("-a", "--address"), "DCGM_EXPORTER_LISTEN", _parse_address, ":9400",
           "Address to listen on: [host]:port."),
    Option("collect_interval_ms", ("-c", "--collect-interval"), "DCGM_EXPORTER_INTERVAL",
           _positive_int(100, "milliseconds"), 1000,
           "NVML sampling interval in milliseconds (one sampling thread for all GPUs)."),
    Option("kubernetes", ("-k", "--kubernetes"), "DCGM_EXPORTER_KUBERNETES", _parse_bool, False,
           "Attribute GPUs to pods through the kubelet PodResources API.", is_switch=True),
    Option("kubernetes_gpu_id_type", ("--kubernetes-gpu-id-type",), "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
           _choice("uid", "device-name"), "uid",
           "How the device plugin names GPUs: uid (GPU-<uuid>, NVIDIA plugin) or device-name (nvidia<N>, GKE)."),
    Option("pod_resources_socket", ("--pod-resources-kubelet-socket",), "DCGM_POD_RESOURCES_KUBELET_SOCKET",
           _parse_str, "/var/lib/kubelet/pod-resources/kubelet.sock", "Path of the kubelet PodResources socket."),
    Option("pod_resources_interval_ms", ("--pod-resources-interval",), "GPU_POD_EXPORTER_POD_RESOURCES_INTERVAL",
           _positive_int(1000, "milliseconds"), 10000,
           "How often to call the kubelet's List (milliseconds); never per scrape."),
    Option("kubernetes_enable_pod_labels", ("--kubernetes-enable-pod-labels",),
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", _parse_bool, False,
           "Copy allowlisted pod labels onto GPU series.", is_switch=True),
    Option("kubernetes_pod_label_allowlist_regex", ("--kubernetes-pod-label-allowlist-regex",),
           "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", _parse_regex_list, (),
           "Comma-separated regular expressions on pod label keys to copy (empty: none unless pod labels "
           "are enabled, then all, bounded)."),
    Option("kubernetes_enable_pod_uid", ("--kubernetes-enable-pod-uid",), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
           _parse_bool, False, "Add the pod_uid label to attributed series.", is_switch=True),
    Option("kubernetes_virtual_gpus", ("--kubernetes-virtual-gpus",), "KUBERNETES_VIRTUAL_GPUS", _parse_bool, False,
           "Repeat shared-GPU series once per sharing pod with a vgpu label, and give GPU_UTIL and FB_USED per pod "
           "from its processes beside the device series (dcgm-exporter's mode; reads the process lists).",
           is_switch=True),
    Option("nvidia_resource_names", ("--nvidia-resource-names",), "NVIDIA_RESOURCE_NAMES", _parse_list, (),
           "Extra comma-separated extended-resource names that carry NVIDIA GPUs."),
    Option("kubernetes_enable_dra", ("--kubernetes-enable-dra",), "KUBERNETES_ENABLE_DRA", _parse_bool, False,
           "Attribute GPUs and MIG devices allocated through Dynamic Resource Allocation (the kubelet's "
           "dynamic_resources, resolved through this node's ResourceSlices) and add dcgm-exporter's dra_* labels.",
           is_switch=True),
    Option("kubernetes_dra_driver_names", ("--kubernetes-dra-driver-names",),
           "GPU_POD_EXPORTER_KUBERNETES_DRA_DRIVER_NAMES", _parse_dra_drivers, ("gpu.nvidia.com",),
           "Comma-separated DRA driver names whose devices are NVIDIA GPUs (with --kubernetes-enable-dra)."),
    Option("configmap_data", ("-m", "--configmap-data"), "DCGM_EXPORTER_CONFIGMAP_DATA", _parse_configmap, "",
           "Read the counters CSV from key 'metrics' of this ConfigMap (<namespace>:<name>) through the API "
           "server instead of --collectors; re-read in the background."),
    Option("configmap_interval_ms", ("--configmap-refresh-interval",),
           "GPU_POD_EXPORTER_CONFIGMAP_REFRESH_INTERVAL", _positive_int(1000, "milliseconds"), 60000,
           "How often to re-read the --configmap-data ConfigMap (milliseconds); never per scrape."),
    Option("hpc_job_mapping_dir", ("--hpc-job-mapping-dir",), "DCGM_HPC_JOB_MAPPING_DIR", _parse_str, "",
           "Directory of files named <gpu> or <gpu>.<gpu-instance> holding job ids (one per line): "
           "adds an hpc_job label (bare-metal schedulers such as Slurm)."),
    Option("hpc_job_mapping_interval_ms", ("--hpc-job-mapping-interval",),
           "GPU_POD_EXPORTER_HPC_JOB_MAPPING_INTERVAL", _positive_int(100, "milliseconds"), 5000,
           "How often to re-read --hpc-job-mapping-dir (milliseconds); never per scrape."),
    Option("kubeconfig", ("--kubeconfig",), "KUBECONFIG", _parse_str, "",
           "kubeconfig file for the API server (default: in-cluster service account)."),
    Option("kubeconfig_allow_exec", ("--kubeconfig-allow-exec",), "GPU_POD_EXPORTER_KUBECONFIG_ALLOW_EXEC",
           _parse_bool, False,
           "Let a kubeconfig's exec credential plugin or auth-provider run (it starts a program); off: refused.",
           is_switch=True),
    Option("team_label_sources", ("--kubernetes-team-label-sources",), "GPU_POD_EXPORTER_TEAM_LABEL_SOURCES",
           _parse_team_sources, ("pod:team", "namespace:team"),
           "Where the team label comes from, first match wins: pod:<key> or namespace:<key>."),
    Option("process_attribution", ("--kubernetes-process-attribution",), "GPU_POD_EXPORTER_PROCESS_ATTRIBUTION",
           _parse_bool, False,
           "Attribute GPU memory and utilization per container from NVML's process list, its per-process "
           "utilization samples and /proc/<pid>/cgroup (needs hostPID).", is_switch=True),
    Option("process_metrics", ("--kubernetes-process-metrics",), "GPU_POD_EXPORTER_PROCESS_METRICS",
           _parse_bool, False, "Also export one series per GPU process (pid label); opt-in, high cardinality.",
           is_switch=True),
    Option("process_interval_ms", ("--process-interval",), "GPU_POD_EXPORTER_PROCESS_INTERVAL",
           _positive_int(1000, "milliseconds"), 5000,
           "How often to read NVML's process lists and per-process utilization (milliseconds); the lists "
           "cost ~4.5 ms per GPU on a real driver."),
    Option("proc_root", ("--proc-root",), "GPU_POD_EXPORTER_PROC_ROOT", _parse_str, "/proc",
           "Where the host's /proc is mounted (for PID -> cgroup -> pod)."),
    Option("xid_count_window_ms", ("-x", "--xid-count-window-size"), "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
           _positive_int(1000, "milliseconds"), 300000, "Window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds."),
    Option("clock_events_window_ms", ("--clock-events-count-window-size",),
           "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", _positive_int(1000, "milliseconds"), 300000,
           "Window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds."),
    Option("peak_window_ms", ("--peak-window",), "GPU_POD_EXPORTER_PEAK_WINDOW", _positive_int(1000, "milliseconds"),
           60000,
           "Trailing window of the DCGM_EXP_*_PEAK series in milliseconds (framebuffer used, utilization, power, "
           "temperature): the highest sample within it. At least the scrape interval, so no spike falls between "
           "two scrapes."),
    Option("web_config_file", ("--web-config-file",), "DCGM_EXPORTER_WEB_CONFIG_FILE", _parse_str, "",
           "Prometheus exporter-toolkit web config (TLS, mTLS, basic auth, headers)."),
    Option("web_systemd_socket", ("--web-systemd-socket",), "DCGM_EXPORTER_SYSTEMD_SOCKET", _parse_bool, False,
           "Serve on the socket systemd passes (socket activation, LISTEN_FDS) instead of binding --address.",
           is_switch=True),
    Option("web_max_requests", ("--web-max-requests",), "GPU_POD_EXPORTER_WEB_MAX_REQUESTS",
           _positive_int(1, "requests", 1_000_000), 32,
           "Accepted for compatibility with gpu-pod-exporter 0.1 manifests; no effect (see --web-max-connections).",
           no_effect="the event-loop server has no worker pool; --web-max-connections bounds open connections"),
    Option("web_max_connections", ("--web-max-connections",), "GPU_POD_EXPORTER_WEB_MAX_CONNECTIONS",
           _positive_int(16, "connections", 1_000_000), 1024,
           "Open client connections at most; at the cap the oldest one that has not sent a request is closed."),
    Option("web_read_timeout_s", ("--web-read-timeout",), "DCGM_EXPORTER_WEB_READ_TIMEOUT", _parse_go_duration,
           5.0, "dcgm-exporter 4.8.3's read timeout (Go duration, e.g. 10s): the time a client has to send its "
           "request head (and TLS handshake)."),
    Option("web_write_timeout_s", ("--web-write-timeout",), "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", _parse_go_duration,
           30.0, "dcgm-exporter 4.8.3's write timeout (Go duration, e.g. 30s): the time a client has to read "
           "the whole response; keep Prometheus's scrape_timeout below it."),
    Option("container_labels", ("--container-labels",), "DCGM_EXPORTER_CONTAINER_LABELS", _parse_bool, False,
           "dcgm-exporter 4.8.3's container label for non-Kubernetes containers (accepted; not supported here).",
           is_switch=True,
           no_effect="the container label for containers outside Kubernetes (Docker Engine API) is not "
                     "supported here; GPUs of Kubernetes pods get container/namespace/pod with -k"),
    Option("container_runtime_socket", ("--container-runtime-socket",), "DCGM_CONTAINER_RUNTIME_SOCKET",
           _parse_str, "", "dcgm-exporter 4.8.3's Docker-compatible runtime socket (accepted; not supported here).",
           no_effect="the container runtime API is not read here (see --container-labels)"),
    # dcgm-exporter 4.6.1-4.8.4's flags (its DCGM field-watch retention, scrape concurrency, Go runtime
    # metrics and a stricter /health): accepted, each with the line that says how this exporter does it.
    Option("max_concurrent_scrapes", ("--max-concurrent-scrapes",), "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES",
           _positive_int(1, "scrapes", 1_000_000), 16,
           "dcgm-exporter 4.8.4's limit on scrapes rendered at once (accepted; scrapes here serve cached bytes).",
           no_effect="a scrape here sends the exposition rendered once per sampling cycle, so concurrent scrapes "
                     "cost no rendering; --web-max-connections bounds the open connections instead"),
    Option("enable_exporter_metrics", ("--enable-exporter-metrics",), "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",
           _parse_bool, False,
           "dcgm-exporter 4.8.4's go_*/process_*/promhttp_* metrics (accepted; this exporter's own metrics are "
           "the gpu_pod_exporter_* families, always served).", is_switch=True,
           no_effect="there is no Go runtime whose go_*/promhttp_* metrics could be served; this exporter's own "
                     "health, timing and API metrics (gpu_pod_exporter_*) are always served"),
    Option("watch_max_keep_age", ("--watch-max-keep-age",), "DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",
           _parse_retention_age, "",
           "dcgm-exporter 4.8.4's DCGM field-watch history age (accepted; there is no DCGM watch here).",
           no_effect="there is no DCGM field-watch history: every sampling cycle reads NVML directly; the Xid "
                     "and clock-event windows are --xid-count-window-size and --clock-events-count-window-size, "
                     "the peaks' --peak-window"),
    Option("watch_max_keep_samples", ("--watch-max-keep-samples",), "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES",
           _positive_int(0, "samples", 1_000_000_000), 0,
           "dcgm-exporter 4.8.4's DCGM field-watch history length (accepted; there is no DCGM watch here).",
           no_effect="there is no DCGM field-watch history (see --watch-max-keep-age)"),
    Option("health_require_gpus", ("--health-require-gpus",), "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS", _parse_bool, False,
           "dcgm-exporter's /health 503 when it sees no GPU (always so here).", is_switch=True,
           no_effect="/health here is 503 whenever NVML is down, no GPU is found or the sample is stale, "
                     "with or without this flag"),
    Option("dcgm_exporter_compat", ("--dcgm-exporter-compat",), "GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT",
           _choice(COMPAT_AUTO, *COMPAT_RELEASES), COMPAT_AUTO,
           "Which dcgm-exporter release to match where releases differ (the node label: Hostname up to 4.8.2, "
           f"hostname from 4.8.3): {', '.join(COMPAT_RELEASES)}; auto: the newest, {COMPAT_NEWEST}."),
    Option("node_name", ("--node-name",), "NODE_NAME", _parse_str, "",
           "Node name for the node label (hostname, or Hostname up to dcgm-exporter 4.8.2) and the pod watch "
           "(default: this machine's hostname)."),
    Option("no_hostname", ("-n", "--no-hostname"), "DCGM_EXPORTER_NO_HOSTNAME", _parse_bool, False,
           "Omit the node label (hostname, or Hostname up to dcgm-exporter 4.8.2).", is_switch=True),
    Option("devices", ("-d", "--devices"), "DCGM_EXPORTER_DEVICES_STR", parse_devices, ALL_DEVICES,
           "Which GPUs / MIG GPU instances the CSV rows are reported for: f, g[:ids], i[:ids], g+i (ids like "
           "0,2-4), as dcgm-exporter; default: as --mig-chip-series says."),
    Option("mig_chip_series", ("--mig-chip-series",), "GPU_POD_EXPORTER_MIG_CHIP_SERIES",
           _choice(*CHIP_SERIES_LAYOUTS), CHIP_SERIES_PER_INSTANCE,
           "Without -d, where a MIG-enabled GPU's chip-wide readings (temperature, power, energy, clocks) go: "
           "per-instance repeats them on every GPU instance's series with its GPU_I_* and pod labels, as "
           "dcgm-exporter (-d f); once puts them on one series per GPU without GPU_I_* or pod labels."),
    Option("use_old_namespace", ("-o", "--use-old-namespace"), "DCGM_EXPORTER_USE_OLD_NAMESPACE", _parse_bool,
           False, "dcgm-exporter 1.x label names: uuid, pod_name, pod_namespace, container_name.", is_switch=True),
    Option("remote_hostengine_info", ("-r", "--remote-hostengine-info"), "DCGM_REMOTE_HOSTENGINE_INFO",
           _parse_str, "", "dcgm-exporter's nv-hostengine address (accepted; no effect here).",
           no_effect="there is no DCGM host engine: this exporter reads the GPUs of its own node through NVML"),
    Option("switch_devices", ("-s", "--switch-devices"), "DCGM_EXPORTER_OTHER_DEVICES_STR", _parse_str, "f",
           "dcgm-exporter's NvSwitch/NvLink selection (accepted; no effect here).",
           no_effect="NvSwitch and NvLink entities are not exported (GPU NvLink counters are CSV rows)"),
    Option("cpu_devices", ("-p", "--cpu-devices"), "DCGM_EXPORTER_CPU_DEVICES_STR", _parse_str, "f",
           "dcgm-exporter's Grace CPU selection (accepted; no effect here).",
           no_effect="CPU and CPU-core entities are not exported (they come from DCGM, not NVML)"),
    Option("fake_gpus", ("--fake-gpus",), "DCGM_EXPORTER_USE_FAKE_GPUS", _parse_bool, False,
           "dcgm-exporter's fake GPUs (accepted; no effect here: use --simulate).", is_switch=True,
           no_effect="DCGM fake GPUs do not exist here; run with --simulate for simulated GPUs, kubelet and "
                     "API server"),
    Option("enable_dcgm_log", ("--enable-dcgm-log",), "DCGM_EXPORTER_ENABLE_DCGM_LOG", _parse_bool, False,
           "dcgm-exporter's DCGM log capture (accepted; no effect here).", is_switch=True,
           no_effect="there is no DCGM library whose log could be captured; --debug logs this exporter's detail"),
    Option("dcgm_log_level", ("--dcgm-log-level",), "DCGM_EXPORTER_DCGM_LOG_LEVEL", _parse_str, "NONE",
           "dcgm-exporter's DCGM log level (accepted; no effect here).",
           no_effect="there is no DCGM library whose log level could be set; --debug logs this exporter's detail"),
    Option("dump_enabled", ("--dump-enabled",), "DCGM_EXPORTER_DUMP_ENABLED", _parse_bool, False,
           "dcgm-exporter's debug dumps (accepted; no effect here).", is_switch=True,
           no_effect="debug dumps of DCGM objects are not written; /metrics, /health and --debug logs show the "
                     "state"),
    Option("dump_directory", ("--dump-directory",), "DCGM_EXPORTER_DUMP_DIRECTORY", _parse_str,
           "", "dcgm-exporter's debug dump directory (accepted; no effect here).",
           no_effect="debug dumps are not written"),
    Option("dump_retention", ("--dump-retention",), "DCGM_EXPORTER_DUMP_RETENTION", _positive_int(0, "hours"), 24,
           "dcgm-exporter's debug dump retention in hours (accepted; no effect here).",
           no_effect="debug dumps are not written"),
    Option("dump_compression", ("--dump-compression",), "DCGM_EXPORTER_DUMP_COMPRESSION", _parse_bool, True,
           "dcgm-exporter's debug dump compression (accepted; no effect here).", is_switch=True,
           no_effect="debug dumps are not written"),
    Option("disable_startup_validate", ("--disable-startup-validate",), "DISABLE_STARTUP_VALIDATE", _parse_bool,
           False, "dcgm-exporter's libdcgm check (accepted; no effect here).", is_switch=True,
           no_effect="there is no libdcgm to validate; NVML problems show on /health instead of stopping the start"),
    Option("enable_gpu_bind_unbind_watch", ("--enable-gpu-bind-unbind-watch",),
           "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", _parse_bool, False,
           "dcgm-exporter's GPU bind/unbind watch (accepted; no effect here).", is_switch=True,
           no_effect="a GPU that disappears is reported lost and re-probed, and NVML is re-initialised when it "
                     "stops working, without a watch"),
    Option("gpu_bind_unbind_poll_interval", ("--gpu-bind-unbind-poll-interval",),
           "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", _parse_str, "1s",
           "dcgm-exporter's bind/unbind poll interval (accepted; no effect here).",
           no_effect="there is no bind/unbind watch to poll"),
    Option("enable_pprof", ("--enable-pprof",), "DCGM_EXPORTER_ENABLE_PPROF", _parse_bool, False,
           "dcgm-exporter's Go profiler endpoints (accepted; no effect here).", is_switch=True,
           no_effect="there is no Go runtime to profile; bench/ has this exporter's profiling harness"),
    Option("replace_blanks_in_model_name", ("-rbmn", "--replace-blanks-in-model-name"),
           "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", _parse_bool, False,
           "Replace spaces in the modelName label with '-'.", is_switch=True),
    Option("log_format", ("--log-format",), "DCGM_EXPORTER_LOG_FORMAT", _choice("text", "json"), "text",
           "Log line format: text or json."),
    Option("debug", ("--debug",), "DCGM_EXPORTER_DEBUG", _parse_bool, False, "Log at debug level.", is_switch=True),
    Option("simulate", ("--simulate",), "GPU_POD_EXPORTER_SIMULATE", _parse_str, "",
           "Run on simulated GPUs (and a simulated kubelet and API server): 'default' or a scenario YAML file."),
)

_BY_ATTR = {option.attr: option for option in OPTIONS}

# Defaults that differ from dcgm-exporter's, each said once at start when left to its default
# (docs/migrate-from-dcgm-exporter.md has the reasons).
UPSTREAM_DEFAULT_DIFFERENCES = {
    "collect_interval_ms": "sampling every 1000 ms; dcgm-exporter's default is 30000 ms (-c 30000 for its cadence)",
}
_BY_YAML_KEY = {option.yaml_key: option for option in OPTIONS}


@dataclass(frozen=True)
class Config:
    """The effective settings. Immutable: every component reads it, none changes it.

    Loaded by ``load_config`` (flags > environment > file > defaults), then completed once by
    ``exporter.cli.resolve`` before anything is wired (a simulated node's endpoints, implied settings).
    """

    collectors: str = ""
    address: str = ":9400"
    collect_interval_ms: int = 1000
    kubernetes: bool = False
    kubernetes_gpu_id_type: str = "uid"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pod_resources_interval_ms: int = 10000
    kubernetes_enable_pod_labels: bool = False
    kubernetes_pod_label_allowlist_regex: tuple[str, ...] = ()
    kubernetes_enable_pod_uid: bool = False
    kubernetes_virtual_gpus: bool = False
    nvidia_resource_names: tuple[str, ...] = ()
    kubernetes_enable_dra: bool = False
    kubernetes_dra_driver_names: tuple[str, ...] = ("gpu.nvidia.com",)
    configmap_data: str = ""
    configmap_interval_ms: int = 60000
    hpc_job_mapping_dir: str = ""
    hpc_job_mapping_interval_ms: int = 5000
    kubeconfig: str = ""
    kubeconfig_allow_exec: bool = False
    team_label_sources: tuple[str, ...] = ("pod:team", "namespace:team")
    process_attribution: bool = False
    process_metrics: bool = False
    process_interval_ms: int = 5000
    proc_root: str = "/proc"
    xid_count_window_ms: int = 300000
    clock_events_window_ms: int = 300000
    peak_window_ms: int = 60000
    web_config_file: str = ""
    web_systemd_socket: bool = False
    web_max_requests: int = 32
    web_max_connections: int = 1024
    web_read_timeout_s: float = 5.0
    web_write_timeout_s: float = 30.0
    container_labels: bool = False
    container_runtime_socket: str = ""
    max_concurrent_scrapes: int = 16
    enable_exporter_metrics: bool = False
    watch_max_keep_age: str = ""
    watch_max_keep_samples: int = 0
    health_require_gpus: bool = False
    dcgm_exporter_compat: str = COMPAT_AUTO
    node_name: str = ""
    no_hostname: bool = False
    devices: DeviceSelection = ALL_DEVICES
    mig_chip_series: str = CHIP_SERIES_PER_INSTANCE
    use_old_namespace: bool = False
    remote_hostengine_info: str = ""
    switch_devices: str = "f"
    cpu_devices: str = "f"
    fake_gpus: bool = False
    enable_dcgm_log: bool = False
    dcgm_log_level: str = "NONE"
    dump_enabled: bool = False
    dump_directory: str = ""
    dump_retention: int = 24
    dump_compression: bool = True
    disable_startup_validate: bool = False
    enable_gpu_bind_unbind_watch: bool = False
    gpu_bind_unbind_poll_interval: str = "1s"
    enable_pprof: bool = False
    replace_blanks_in_model_name: bool = False
    log_format: str = "text"
    debug: bool = False
    simulate: str = ""
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


def _check_table_matches_config() -> None:
    names = {f.name for f in dataclasses.fields(Config)} - {"sources", "config_file", "inline_counters",
                                                             "inline_counters_source", "notes"}
    declared = set(_BY_ATTR)
    if names != declared:  # pragma: no cover - a programming error caught by the test suite at import
        raise RuntimeError(f"Config fields and OPTIONS differ: {sorted(names ^ declared)}")
    for option in OPTIONS:
        if getattr(Config(), option.attr) != option.default:  # pragma: no cover
            raise RuntimeError(f"default of {option.attr} differs between Config and OPTIONS")


_check_table_matches_config()


def with_implied_settings(config: Config) -> Config:
    """``config`` with the settings its others imply; part of the one resolve step (``exporter.cli.resolve``).

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
        return ",".join(value) or "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):  # a Go duration, in seconds
        return f"{value:g}s"
    return str(value) if value != "" else "none"


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
            values[option.attr] = _convert(option, env[option.env], where)
            sources[option.attr] = where

    for attr, given in parsed.items():
        option = _BY_ATTR[attr]
        where = f"flag {option.long_flag}"
        # a repeatable flag: every occurrence counts, each comma-separated
        raw = ",".join(given) if isinstance(given, list) else given
        values[attr] = _convert(option, raw, where)
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


def _convert(option: Option, raw: object, where: str) -> Any:
    try:
        return option.parse(raw)
    except ValueError as exc:
        raise ConfigError(where, option.yaml_key, str(exc)) from None


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
        from exporter.upstream_config import load_upstream_config  # noqa: PLC0415 - only for that format

        return load_upstream_config(root)

    result: dict[str, tuple[Any, str]] = {}
    for key, value in root.mapping().items():
        where = f"{path}:{value.line}"
        option = _BY_YAML_KEY.get(key)
        if option is None:
            raise ConfigError(where, _shown_key(key), _unknown_key_message(key))
        raw = value.value()
        if raw is None:
            raise value.error("empty value: give a value or remove the key")
        result[option.attr] = (_convert(option, raw, where), where)
    return result


def _unknown_key_message(key: str) -> str:
    """One line even with 60 options: the closest names, not the whole list (``--help`` has it)."""
    return safeyaml.unknown_key(key, _BY_YAML_KEY,
                                "the keys are the long flag names without '--'; see --help for all of them")


def _shown_key(key: str) -> str:
    return key if len(key) <= 60 else key[:57] + "..."

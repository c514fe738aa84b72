"""dcgm-exporter 4.8's command line, written from the reference notes (dcgm-exporter.md §6; its
``pkg/cmd/app.go``): every flag with its aliases, its environment variable, and a value a user
would give. The tests hold this exporter to it: each one is accepted (never exit 2), and the
migration guide's table lists each one with its behaviour here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpstreamFlag:
    long: str
    aliases: tuple[str, ...]
    env: str
    value: str | None  # None: a boolean switch given without a value

    @property
    def argv(self) -> list[str]:
        return [self.long] if self.value is None else [self.long, self.value]

    @property
    def env_value(self) -> str:
        return "true" if self.value is None else self.value


UPSTREAM_FLAGS = (
    UpstreamFlag("--collectors", ("-f",), "DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/default-counters.csv"),
    UpstreamFlag("--address", ("-a",), "DCGM_EXPORTER_LISTEN", ":9400"),
    UpstreamFlag("--collect-interval", ("-c",), "DCGM_EXPORTER_INTERVAL", "30000"),
    UpstreamFlag("--kubernetes", ("-k",), "DCGM_EXPORTER_KUBERNETES", None),
    UpstreamFlag("--kubernetes-gpu-id-type", (), "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "device-name"),
    UpstreamFlag("--kubernetes-enable-pod-labels", (), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", None),
    UpstreamFlag("--kubernetes-enable-pod-uid", (), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", None),
    UpstreamFlag("--kubernetes-pod-label-allowlist-regex", (), "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
                 "^app$,^team$"),
    UpstreamFlag("--kubernetes-virtual-gpus", (), "KUBERNETES_VIRTUAL_GPUS", None),
    UpstreamFlag("--kubernetes-enable-dra", (), "KUBERNETES_ENABLE_DRA", None),
    UpstreamFlag("--nvidia-resource-names", (), "NVIDIA_RESOURCE_NAMES", "nvidia.com/a100"),
    UpstreamFlag("--pod-resources-kubelet-socket", (), "DCGM_POD_RESOURCES_KUBELET_SOCKET",
                 "/var/lib/kubelet/pod-resources/kubelet.sock"),
    UpstreamFlag("--hpc-job-mapping-dir", (), "DCGM_HPC_JOB_MAPPING_DIR", "/var/run/hpc-jobs"),
    UpstreamFlag("--use-old-namespace", ("-o",), "DCGM_EXPORTER_USE_OLD_NAMESPACE", None),
    UpstreamFlag("--remote-hostengine-info", ("-r",), "DCGM_REMOTE_HOSTENGINE_INFO", "localhost:5555"),
    UpstreamFlag("--devices", ("-d",), "DCGM_EXPORTER_DEVICES_STR", "g:0,1"),
    UpstreamFlag("--switch-devices", ("-s",), "DCGM_EXPORTER_OTHER_DEVICES_STR", "g"),
    UpstreamFlag("--cpu-devices", ("-p",), "DCGM_EXPORTER_CPU_DEVICES_STR", "g"),
    UpstreamFlag("--no-hostname", ("-n",), "DCGM_EXPORTER_NO_HOSTNAME", None),
    UpstreamFlag("--fake-gpus", (), "DCGM_EXPORTER_USE_FAKE_GPUS", None),
    UpstreamFlag("--configmap-data", ("-m",), "DCGM_EXPORTER_CONFIGMAP_DATA",
                 "gpu-monitoring:exporter-metrics-config-map"),
    UpstreamFlag("--web-config-file", (), "DCGM_EXPORTER_WEB_CONFIG_FILE", "/etc/dcgm-exporter/web-config.yaml"),
    UpstreamFlag("--web-systemd-socket", (), "DCGM_EXPORTER_SYSTEMD_SOCKET", None),
    UpstreamFlag("--xid-count-window-size", ("-x",), "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "300000"),
    UpstreamFlag("--clock-events-count-window-size", (), "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", "300000"),
    UpstreamFlag("--replace-blanks-in-model-name", ("-rbmn",), "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", None),
    UpstreamFlag("--debug", (), "DCGM_EXPORTER_DEBUG", None),
    UpstreamFlag("--enable-dcgm-log", (), "DCGM_EXPORTER_ENABLE_DCGM_LOG", None),
    UpstreamFlag("--dcgm-log-level", (), "DCGM_EXPORTER_DCGM_LOG_LEVEL", "ERROR"),
    UpstreamFlag("--log-format", (), "DCGM_EXPORTER_LOG_FORMAT", "json"),
    UpstreamFlag("--dump-enabled", (), "DCGM_EXPORTER_DUMP_ENABLED", None),
    UpstreamFlag("--dump-directory", (), "DCGM_EXPORTER_DUMP_DIRECTORY", "/tmp/dcgm-exporter-debug"),
    UpstreamFlag("--dump-retention", (), "DCGM_EXPORTER_DUMP_RETENTION", "48"),
    UpstreamFlag("--dump-compression", (), "DCGM_EXPORTER_DUMP_COMPRESSION", None),
    UpstreamFlag("--disable-startup-validate", (), "DISABLE_STARTUP_VALIDATE", None),
    UpstreamFlag("--enable-gpu-bind-unbind-watch", (), "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", None),
    UpstreamFlag("--gpu-bind-unbind-poll-interval", (), "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "5s"),
    UpstreamFlag("--enable-pprof", (), "DCGM_EXPORTER_ENABLE_PPROF", None),
)

"""dcgm-exporter's command line in both generations, written from its ``pkg/cmd/app.go`` (4.8.2, and
4.6.0-4.8.3's release notes and command-line reference): every flag with its aliases, its environment
variable, a value a user would give, the first generation that has it, and its default there. The
tests hold this exporter to it: each one is accepted (never exit 2), in Go's single-dash spelling too,
and the migration guide's table is generated from it (tests/test_migration_doc.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpstreamFlag:
    long: str
    aliases: tuple[str, ...]
    env: str
    value: str | None  # None: a boolean switch given without a value
    default: str = ""  # dcgm-exporter's default, as its --help shows it ("" when it has none worth comparing)
    since: str = "4.8.2"  # the dcgm-exporter generation that has it ("4.8.2": 4.8.2 and earlier too)

    @property
    def argv(self) -> list[str]:
        return [self.long] if self.value is None else [self.long, self.value]

    @property
    def env_value(self) -> str:
        return "true" if self.value is None else self.value


UPSTREAM_FLAGS = (
    UpstreamFlag("--collectors", ("-f",), "DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/default-counters.csv",
                 default="/etc/dcgm-exporter/default-counters.csv"),
    UpstreamFlag("--address", ("-a",), "DCGM_EXPORTER_LISTEN", ":9400", default=":9400"),
    UpstreamFlag("--collect-interval", ("-c",), "DCGM_EXPORTER_INTERVAL", "30000", default="30000"),
    UpstreamFlag("--kubernetes", ("-k",), "DCGM_EXPORTER_KUBERNETES", None, default="false"),
    UpstreamFlag("--kubernetes-gpu-id-type", (), "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "device-name", default="uid"),
    UpstreamFlag("--kubernetes-enable-pod-labels", (), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", None),
    UpstreamFlag("--kubernetes-enable-pod-uid", (), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", None),
    UpstreamFlag("--kubernetes-pod-label-allowlist-regex", (), "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
                 "^app$,^team$"),
    UpstreamFlag("--kubernetes-virtual-gpus", (), "KUBERNETES_VIRTUAL_GPUS", None),
    UpstreamFlag("--kubernetes-enable-dra", (), "KUBERNETES_ENABLE_DRA", None),
    UpstreamFlag("--nvidia-resource-names", (), "NVIDIA_RESOURCE_NAMES", "nvidia.com/a100"),
    UpstreamFlag("--pod-resources-kubelet-socket", (), "DCGM_POD_RESOURCES_KUBELET_SOCKET",
                 "/var/lib/kubelet/pod-resources/kubelet.sock", default="/var/lib/kubelet/pod-resources/kubelet.sock"),
    UpstreamFlag("--hpc-job-mapping-dir", (), "DCGM_HPC_JOB_MAPPING_DIR", "/var/run/hpc-jobs"),
    UpstreamFlag("--use-old-namespace", ("-o",), "DCGM_EXPORTER_USE_OLD_NAMESPACE", None),
    UpstreamFlag("--remote-hostengine-info", ("-r",), "DCGM_REMOTE_HOSTENGINE_INFO", "localhost:5555",
                 default="localhost:5555"),
    UpstreamFlag("--devices", ("-d",), "DCGM_EXPORTER_DEVICES_STR", "g:0,1", default="f"),
    UpstreamFlag("--switch-devices", ("-s",), "DCGM_EXPORTER_OTHER_DEVICES_STR", "g", default="f"),
    UpstreamFlag("--cpu-devices", ("-p",), "DCGM_EXPORTER_CPU_DEVICES_STR", "g", default="f"),
    UpstreamFlag("--no-hostname", ("-n",), "DCGM_EXPORTER_NO_HOSTNAME", None),
    UpstreamFlag("--fake-gpus", (), "DCGM_EXPORTER_USE_FAKE_GPUS", None),
    UpstreamFlag("--configmap-data", ("-m",), "DCGM_EXPORTER_CONFIGMAP_DATA",
                 "gpu-monitoring:exporter-metrics-config-map", default="none"),
    UpstreamFlag("--web-config-file", (), "DCGM_EXPORTER_WEB_CONFIG_FILE", "/etc/dcgm-exporter/web-config.yaml"),
    UpstreamFlag("--web-systemd-socket", (), "DCGM_EXPORTER_SYSTEMD_SOCKET", None),
    UpstreamFlag("--xid-count-window-size", ("-x",), "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "300000", default="300000"),
    UpstreamFlag("--clock-events-count-window-size", (), "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", "300000",
                 default="300000"),
    UpstreamFlag("--replace-blanks-in-model-name", ("-rbmn",), "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", None),
    UpstreamFlag("--debug", (), "DCGM_EXPORTER_DEBUG", None),
    UpstreamFlag("--enable-dcgm-log", (), "DCGM_EXPORTER_ENABLE_DCGM_LOG", None),
    UpstreamFlag("--dcgm-log-level", (), "DCGM_EXPORTER_DCGM_LOG_LEVEL", "ERROR", default="NONE"),
    UpstreamFlag("--log-format", (), "DCGM_EXPORTER_LOG_FORMAT", "json", default="text"),
    UpstreamFlag("--dump-enabled", (), "DCGM_EXPORTER_DUMP_ENABLED", None),
    UpstreamFlag("--dump-directory", (), "DCGM_EXPORTER_DUMP_DIRECTORY", "/tmp/dcgm-exporter-debug",
                 default="/tmp/dcgm-exporter-debug"),
    UpstreamFlag("--dump-retention", (), "DCGM_EXPORTER_DUMP_RETENTION", "48", default="24"),
    UpstreamFlag("--dump-compression", (), "DCGM_EXPORTER_DUMP_COMPRESSION", None, default="true"),
    UpstreamFlag("--disable-startup-validate", (), "DISABLE_STARTUP_VALIDATE", None),
    UpstreamFlag("--enable-gpu-bind-unbind-watch", (), "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", None),
    UpstreamFlag("--gpu-bind-unbind-poll-interval", (), "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "5s",
                 default="1s"),
    UpstreamFlag("--enable-pprof", (), "DCGM_EXPORTER_ENABLE_PPROF", None),
    # Added in 4.6.0-4.8.3 (4.8.2 exits 2 on them). Their 4.8.3 defaults are unverified (a later appconfig has 10s/30s).
    UpstreamFlag("--web-read-timeout", (), "DCGM_EXPORTER_WEB_READ_TIMEOUT", "10s", since="4.8.3"),
    UpstreamFlag("--web-write-timeout", (), "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", "30s", since="4.8.3"),
    UpstreamFlag("--container-labels", (), "DCGM_EXPORTER_CONTAINER_LABELS", None, default="false", since="4.8.3"),
    UpstreamFlag("--container-runtime-socket", (), "DCGM_EXPORTER_CONTAINER_RUNTIME_SOCKET", "/run/docker.sock",
                 since="4.8.3"),
)

# 4.8.3's --config-file is not a setting of its own here (it reads the others), so it is listed apart.
UPSTREAM_CONFIG_FILE = UpstreamFlag("--config-file", (), "DCGM_EXPORTER_CONFIG_FILE", "/etc/dcgm-exporter/config.yaml",
                                    since="4.8.3")

"""dcgm-exporter flags that change where things come from, on the real process: -m (a ConfigMap,
re-read while running) and --web-systemd-socket (a socket systemd passes)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.configmap_api import NAME, NAMESPACE, ConfigMapApi
from tests.support.exporter_process import parse_samples, running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.processes import stop_process

TEMP_ONLY = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
POWER_ONLY = "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"


def _names(text: str) -> set[str]:
    return {name for name, _labels, _value in parse_samples(text) if name.startswith("DCGM_FI_")}


def test_configmap_counters_are_read_at_start_and_a_change_applies_without_restart(tmp_path: Path) -> None:
    with ConfigMapApi(TEMP_ONLY) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        args = ["--simulate", "--kubeconfig", str(kubeconfig), "-m", f"{NAMESPACE}:{NAME}",
                "--configmap-refresh-interval", "1000", "--collect-interval", "200"]
        with running_exporter(args) as exporter:
            exporter.wait_healthy()
            wait_for(lambda: _names(exporter.metrics()) == {"DCGM_FI_DEV_GPU_TEMP"}, 20.0, "the ConfigMap's row")
            server.metrics = POWER_ONLY
            wait_for(lambda: _names(exporter.metrics()) == {"DCGM_FI_DEV_POWER_USAGE"}, 20.0, "the changed row")
            assert exporter.process.poll() is None
            assert "counters CSV changed" in exporter.log()


def test_configmap_unreachable_at_start_falls_back_then_applies(tmp_path: Path) -> None:
    with ConfigMapApi(TEMP_ONLY) as server:
        server.status = 503
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        args = ["--simulate", "--kubeconfig", str(kubeconfig), "-m", f"{NAMESPACE}:{NAME}",
                "--configmap-refresh-interval", "1000", "--collect-interval", "200"]
        with running_exporter(args) as exporter:
            exporter.wait_healthy()
            # the built-in default counters, from the first sample on (rendered just after /health turns 200)
            wait_for(lambda: "DCGM_FI_DEV_POWER_USAGE" in _names(exporter.metrics()), 20.0, "the default counters")
            assert "answered 503" in exporter.log()
            server.status = 200
            wait_for(lambda: _names(exporter.metrics()) == {"DCGM_FI_DEV_GPU_TEMP"}, 30.0, "the ConfigMap's row")


# systemd starts the service with the socket as file descriptor 3 and LISTEN_PID set to the service's
# own pid; this launcher does the same for the exporter (exec keeps the pid).
_LAUNCHER = """
import os, sys
os.dup2(int(os.environ.pop("TEST_LISTEN_FD")), 3)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "exporter", *sys.argv[1:]])
"""


def test_web_systemd_socket_serves_on_the_socket_systemd_passes(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    log = (tmp_path / "exporter.log").open("wb")
    env = {**os.environ, "TEST_LISTEN_FD": str(listener.fileno())}
    process = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, "--simulate", "--web-systemd-socket", "--address", "127.0.0.1:1"],
        cwd=REPO_ROOT, env=env, pass_fds=(listener.fileno(),), stdout=log, stderr=subprocess.STDOUT)
    listener.close()  # the exporter holds it now
    try:
        def metrics() -> str | None:
            assert process.poll() is None, (tmp_path / "exporter.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    text = response.read().decode()
            except OSError:
                return None
            return text if "DCGM_FI_DEV_GPU_TEMP{" in text else None

        wait_for(metrics, 30.0, "metrics on the passed socket")
    finally:
        stop_process(process)
        log.close()


def test_web_systemd_socket_without_a_socket_is_one_line_and_exit_2() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LISTEN_")}
    result = subprocess.run([sys.executable, "-m", "exporter", "--simulate", "--web-systemd-socket"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "gpu-pod-exporter: error: flag --web-systemd-socket: web-systemd-socket: no socket was passed")


def test_devices_flex_reports_a_mig_gpu_per_instance_with_its_chip_readings() -> None:
    """-d f on the MIG demo node (GPU 0: seven 1g.10gb, GPU 1: three instances, GPUs 2-3 whole): the
    series dcgm-exporter's default gives, as without -d; --mig-chip-series once: each chip once (README,
    "MIG reporting")."""

    def temperatures(args: list[str]) -> list[tuple[str, str | None]]:
        with running_exporter(["--simulate", "mig-h100", "--collect-interval", "200", *args]) as exporter:
            exporter.wait_healthy()

            def complete() -> list[tuple[str, str | None]] | None:
                found = sorted((labels["gpu"], labels.get("GPU_I_ID"))
                               for name, labels, _ in parse_samples(exporter.metrics())
                               if name == "DCGM_FI_DEV_GPU_TEMP")
                return found if {gpu for gpu, _ in found} == {"0", "1", "2", "3"} else None

            return wait_for(complete, 30.0, "temperatures of the four GPUs")

    flex = temperatures(["-d", "f"])
    assert [gpu for gpu, instance in flex if instance is None] == ["2", "3"]
    assert len([gpu for gpu, instance in flex if gpu == "0"]) == 7 and ("0", None) not in flex
    assert len([gpu for gpu, instance in flex if gpu == "1"]) == 3
    assert temperatures([]) == flex
    assert temperatures(["--mig-chip-series", "once"]) == [("0", None), ("1", None), ("2", None), ("3", None)]

"""deploy/systemd/: the hardened unit for bare-metal hosts and its environment file."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

import pytest

from exporter.config import OPTIONS
from tests.deploy.chart_support import REPO
from tests.support.programs import require_program

UNIT = REPO / "deploy" / "systemd" / "gpu-pod-exporter.service"
ENV_FILE = REPO / "deploy" / "systemd" / "gpu-pod-exporter.env"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value in order (systemd keys may repeat; configparser keeps one)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"setting outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    text = UNIT.read_text(encoding="utf-8")
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)  # it is a valid INI file
    assert parser.sections() == ["Unit", "Service", "Install"]
    return parse_unit(text)


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section].get(key)
    assert values and len(values) == 1, f"[{section}] {key}: {values}"
    return values[0]


def test_starts_after_the_nvidia_persistence_daemon(unit: dict[str, dict[str, list[str]]]) -> None:
    assert "nvidia-persistenced.service" in one(unit, "Unit", "After").split()
    assert "nvidia-persistenced.service" in one(unit, "Unit", "Wants").split()
    assert "Requires" not in unit["Unit"]  # hosts without the daemon still start the exporter


def test_service_runs_the_console_script_with_the_env_file(unit: dict[str, dict[str, list[str]]]) -> None:
    assert one(unit, "Service", "EnvironmentFile") == "-/etc/default/gpu-pod-exporter"
    exec_start = one(unit, "Service", "ExecStart").split()
    assert exec_start[0].startswith("/") and exec_start[0].endswith("/gpu-pod-exporter")
    assert exec_start[1:] == ["$GPU_POD_EXPORTER_ARGS"]
    assert one(unit, "Service", "Restart") == "on-failure"
    assert one(unit, "Service", "RestartPreventExitStatus") == "2"  # config errors exit 2
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


def test_hardening_options(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    expected = {
        "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
        "RestrictNamespaces": "yes", "DevicePolicy": "closed", "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
    }
    for key, value in expected.items():
        assert service.get(key) == [value], f"{key}: {service.get(key)}"
    assert service["DeviceAllow"] == ["char-nvidia* rw"]
    assert service["SupplementaryGroups"] == ["video"]
    families = set(one(unit, "Service", "RestrictAddressFamilies").split())
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= families and "AF_PACKET" not in families
    assert "@system-service" in service["SystemCallFilter"]


def test_no_option_that_breaks_nvml(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    assert service.get("PrivateDevices", ["no"]) == ["no"]  # would hide /dev/nvidia*
    assert "ProcSubset" not in service  # pid would hide /proc/driver/nvidia
    assert service.get("MemoryDenyWriteExecute", ["no"]) == ["no"]  # ctypes closures
    assert "PrivateUsers" not in service  # would unmap the video group


def test_env_file_names_only_variables_the_exporter_reads() -> None:
    known = {option.env for option in OPTIONS if option.env} | {"GPU_POD_EXPORTER_ARGS"}
    names = re.findall(r"^#?([A-Z][A-Z0-9_]+)=", ENV_FILE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(names) >= 5
    assert set(names) <= known, f"unknown variables: {sorted(set(names) - known)}"


def _systemd_analyze() -> str:
    return require_program("systemd-analyze", package="systemd")


def test_systemd_accepts_every_directive(tmp_path: Path) -> None:
    """systemd's own parser: an unknown key or a bad value is reported; nothing may be."""
    program = _systemd_analyze()
    unit = tmp_path / "gpu-pod-exporter.service"
    # The console script is not installed here; point ExecStart at a program that exists.
    text = UNIT.read_text(encoding="utf-8").replace("/opt/gpu-pod-exporter/bin/gpu-pod-exporter", "/bin/true")
    unit.write_text(text, encoding="utf-8")
    result = subprocess.run([program, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "gpu-pod-exporter" in line]
    assert result.returncode == 0 and complaints == [], result.stdout + result.stderr


def test_systemd_rates_the_exposure_low() -> None:
    program = _systemd_analyze()
    result = subprocess.run([program, "security", "--offline=yes", str(UNIT)], capture_output=True, text=True,
                            check=False, timeout=60)
    match = re.search(r"Overall exposure level for gpu-pod-exporter\.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 3.0  # 0 (locked down) .. 10 (unprotected)

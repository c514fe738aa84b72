"""Least privilege, proved on the real process: it serves with no capabilities and as a user that owns nothing.

What the exporter needs from the host is file access (the NVIDIA device nodes, the kubelet's
pod-resources socket, and, for per-process attribution only, the host's /proc), never a Linux
capability. These tests start ``python -m exporter --simulate`` with every capability gone:

* as a fresh UID with no passwd entry, no groups and no capabilities (``setpriv``, or a tiny
  Python wrapper that calls setgroups/setgid/setuid then execs, when setpriv is missing);
* as UID 0 with an empty capability bounding set (the chart's default when it must write to the
  root-owned kubelet socket: root's file permissions, none of root's powers).

Each asserts from /proc/<pid>/status that the process really holds no capability, and that
/health and /metrics answer. The chart side (capabilities drop ALL, no privileged, no privilege
escalation, read-only root filesystem, in every CI scenario) is asserted by
tests/deploy/test_helm_chart.py::test_every_scenario_stays_unprivileged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.exporter_process import running_exporter

pytestmark = pytest.mark.e2e

FRESH_ID = 54321  # no passwd/group entry: owns no file on the system


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = rest.strip()
    return fields


def drop_to_fresh_user(tool: str) -> list[str]:
    if tool == "setpriv":
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is not installed; the setuid wrapper covers this")
        return [setpriv, f"--reuid={FRESH_ID}", f"--regid={FRESH_ID}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs"]
    # setuid() from root to another user clears every capability set (no keep-caps); argv[1] is
    # the interpreter, so the exporter's command line follows unchanged.
    code = (f"import os, sys; os.setgroups([]); os.setgid({FRESH_ID}); os.setuid({FRESH_ID}); "
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", code]


def assert_serves_without_privilege(wrapper: list[str], expected_uid: int) -> None:
    with running_exporter(["--simulate", "default"], wrapper=wrapper) as exporter:
        exporter.wait_healthy()
        status = proc_status(exporter.process.pid)
        assert status["Uid"].split() == [str(expected_uid)] * 4
        assert int(status["CapEff"], 16) == 0, status["CapEff"]
        assert int(status["CapPrm"], 16) == 0, status["CapPrm"]
        assert "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics()
        assert "Permission denied" not in exporter.log()


@pytest.mark.parametrize("tool", ["setpriv", "setuid-wrapper"])
def test_serves_as_a_fresh_unprivileged_user_with_no_capabilities(tool: str) -> None:
    if os.geteuid() != 0:
        # Already unprivileged (a developer's shell, most CI): run as we are and check the same things.
        assert_serves_without_privilege([], os.geteuid())
        return
    wrapper = drop_to_fresh_user(tool)
    probe = subprocess.run([*wrapper, sys.executable, "-c", "import prometheus_client, yaml, bcrypt, pynvml"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        # Not the exporter's doing: this machine's Python installation itself is unreadable for
        # other users (e.g. a pyenv under /root with mode 700). The root-without-capabilities test
        # below still proves that no capability is needed.
        pytest.skip(f"this Python installation cannot be read by UID {FRESH_ID}: {probe.stderr.strip()[-200:]}")
    assert_serves_without_privilege(wrapper, FRESH_ID)


def test_serves_as_root_with_an_empty_capability_bounding_set() -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to drop root's capabilities; the fresh-user test covers the rest")
    assert_serves_without_privilege([setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"], 0)

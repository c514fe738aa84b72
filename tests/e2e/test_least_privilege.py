"""Least privilege, proved on the real process: it serves with no capabilities and as a user that owns nothing.

What the exporter needs from the host is file access (the NVIDIA device nodes, the kubelet's
pod-resources socket, and, for per-process attribution only, the host's /proc), never a Linux
capability. These tests start ``python -m exporter --simulate`` with every capability gone:

* as UID 0 with an empty capability bounding set (the chart's default when it must write to the
  root-owned kubelet socket: root's file permissions, none of root's powers), or
* as the unprivileged user the test already runs as.

(A "fresh UID that owns nothing" variant needs a Python installation readable by any user; where the
interpreter lives under a private home, as on the project's CI image, it cannot start, so it is not
part of the suite. The container image runs as UID 10001: see the Dockerfile.)

Each asserts from /proc/<pid>/status that the process really holds no capability, and that
/health and /metrics answer. The chart side (capabilities drop ALL, no privileged, no privilege
escalation, read-only root filesystem, in every CI scenario) is asserted by
tests/deploy/test_helm_chart.py::test_every_scenario_stays_unprivileged.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.exporter_process import running_exporter

pytestmark = pytest.mark.e2e

def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = rest.strip()
    return fields


def assert_serves_without_privilege(wrapper: list[str], expected_uid: int) -> None:
    with running_exporter(["--simulate", "default"], wrapper=wrapper) as exporter:
        exporter.wait_healthy()
        status = proc_status(exporter.process.pid)
        assert status["Uid"].split() == [str(expected_uid)] * 4
        assert int(status["CapEff"], 16) == 0, status["CapEff"]
        assert int(status["CapPrm"], 16) == 0, status["CapPrm"]
        assert "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics()
        assert "Permission denied" not in exporter.log()


def test_serves_with_no_capabilities_at_all() -> None:
    """Root with an empty bounding set when we are root (the chart's case for the kubelet socket); otherwise
    the unprivileged user we already are. Either way /proc says CapEff == CapPrm == 0 and it serves."""
    if os.geteuid() != 0:
        assert_serves_without_privilege([], os.geteuid())
        return
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux, essential on Debian) is needed to drop root's capabilities"
    assert_serves_without_privilege([setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"], 0)

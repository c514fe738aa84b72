"""``gpu-pod-exporter doctor`` on the real driver: every GPU is seen, and no counter row is failing.

The doctor runs as a user runs it (a separate process, the exporter's default settings, this
node's environment). "Not supported on this GPU" is a fine answer; "failing" or "no value" for a
default reading means the exporter asks the driver something the wrong way, so it fails the test.
The report is kept as ``doctor.json`` in the output directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.nvidia_smi import query_gpu
from tests.support.paths import REPO_ROOT
from tests.support.ports import free_port

pytestmark = pytest.mark.gpu


def test_doctor_on_the_real_driver(gpu_count: int, output_dir: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "exporter", "doctor", "--json", "--timeout", "30",
                             "--address", f"127.0.0.1:{free_port()}"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=600, check=False)
    (output_dir / "doctor.json").write_text(result.stdout, encoding="utf-8")
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    rows = {(row["section"], row["check"]): row for row in report["rows"]}
    assert rows[("nvml", "library")]["verdict"] == "ok", rows[("nvml", "library")]
    assert rows[("nvml", "gpus")]["data"]["count"] == gpu_count
    uuids = query_gpu("uuid")
    assert uuids is not None
    for index in range(gpu_count):
        identity = rows[(f"gpu {index}", "identity")]
        assert identity["verdict"] == "ok", identity
        assert identity["data"]["uuid"] == uuids[index].text
        for check in ("mig", "gpm", "events", "process list"):
            assert rows[(f"gpu {index}", check)]["verdict"] == "ok", rows[(f"gpu {index}", check)]
    bad = [f"{row['section']} {row['check']}: {row['detail']}" for row in report["rows"]
           if row.get("data", {}).get("kind") == "counter" and row["data"]["state"] in ("failing", "no-value")]
    assert not bad, "\n".join(bad)

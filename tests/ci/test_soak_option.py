"""`./scripts/test --soak N`: a wrong N is refused at once, before any install, with one line and exit 2;
the soak runs with stress-ng beside it (scripts/soak-load.sh), stopped when the soak ends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.chart_support import REPO


@pytest.mark.parametrize("args", [["--soak"], ["--soak", "five"], ["--soak", "0"], ["--soak", "-3"]])
def test_a_soak_without_a_run_count_is_refused_before_anything_runs(args: list[str]) -> None:
    result = subprocess.run([str(REPO / "scripts" / "test"), *args], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == "scripts/test: --soak needs a number of runs (e.g. --soak 5)"
    assert result.stdout == ""  # no install, no lint: nothing ran


STAND_IN_STRESS = """#!/bin/bash
trap 'echo stopped >> "$STRESS_RECORD"; exit 0' TERM
echo "$@" > "$STRESS_RECORD.args"
while :; do sleep 0.05; done
"""


def soak_load(tmp_path: Path, stress: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """scripts/soak-load.sh's start, then (once the load has said what it was asked) its stop, with
    ``stress`` as the stress-ng on PATH; what that stress-ng recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "stress-ng"
    program.write_text(stress, encoding="utf-8")
    program.chmod(0o755)
    record = tmp_path / "stress"
    script = (f'. "{REPO}/scripts/venv.sh" && . "{REPO}/scripts/soak-load.sh" && start_soak_load && '
              f'if [ -n "$soak_load_pid" ]; then until [ -s "{record}.args" ]; do sleep 0.05; done; fi && '
              'stop_soak_load && echo "load stopped"')
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STRESS_RECORD": str(record),
                              **env})
    return run, record


def test_the_soak_runs_beside_stress_ng_and_stops_it(tmp_path: Path) -> None:
    run, record = soak_load(tmp_path, STAND_IN_STRESS)
    assert run.returncode == 0, run.stderr
    assert "==> soak load: stress-ng --cpu 4 --io 2 --vm 1, beside every run until the soak ends" in run.stdout
    assert Path(f"{record}.args").read_text().split() == ["--cpu", "4", "--io", "2", "--vm", "1", "--quiet"]
    assert record.read_text() == "stopped\n"  # stopped when the soak ends, not left behind
    assert run.stdout.rstrip().endswith("load stopped")


def test_the_soak_load_can_be_chosen_or_left_out(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    run, record = soak_load(tmp_path / "none", STAND_IN_STRESS, SOAK_LOAD="none")
    assert run.returncode == 0 and "==> soak without load (SOAK_LOAD=none)" in run.stdout
    assert not Path(f"{record}.args").exists()
    (tmp_path / "cpu").mkdir()
    chosen, record = soak_load(tmp_path / "cpu", STAND_IN_STRESS, SOAK_LOAD="--cpu 2")
    assert chosen.returncode == 0, chosen.stderr
    assert Path(f"{record}.args").read_text().split() == ["--cpu", "2", "--quiet"]


def test_a_load_that_cannot_start_stops_the_soak_with_one_line(tmp_path: Path) -> None:
    run, _ = soak_load(tmp_path, "#!/bin/bash\necho 'stress-ng: unknown option --bogus' >&2\nexit 1\n",
                       SOAK_LOAD="--bogus")
    assert run.returncode != 0
    assert "scripts/test: stress-ng --bogus exited at once (see its message above)" in run.stderr
    assert "load stopped" not in run.stdout

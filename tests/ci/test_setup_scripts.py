"""scripts/venv.sh, behind the README's commands and scripts/cluster: one line per step, isolated, no
repeated installs, and no trust in a half-made environment.

The real interpreter is replaced by a stand-in that records what it is asked to do (``-m venv``,
``-m pip``) and runs everything else for real, so the script's decisions are checked in
milliseconds, without creating environments or downloading anything.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAND_IN = f"""#!{sys.executable}
import os, shutil, sys
args = sys.argv[1:]
log = os.environ["STAND_IN_LOG"]
if args[:2] == ["-m", "venv"]:
    target = args[-1]
    os.makedirs(os.path.join(target, "bin"), exist_ok=True)
    shutil.copy(__file__, os.path.join(target, "bin", "python"))
    with open(os.path.join(target, "pyvenv.cfg"), "w") as cfg:
        cfg.write("include-system-site-packages = " + ("true" if "--system-site-packages" in args else "false") + "\\n")
    with open(log, "a") as out:
        out.write("venv " + " ".join(args[2:]) + "\\n")
    sys.exit(0)
if args[:2] == ["-m", "pip"]:
    with open(log, "a") as out:
        out.write("pip " + " ".join(args[2:]) + "\\n")
    sys.exit(int(os.environ.get("STAND_IN_PIP_EXIT", "0")))
if args[:2] == ["-m", "devcluster"]:
    with open(log, "a") as out:
        out.write("devcluster " + " ".join(args[2:]) + "\\n")
    sys.exit(0)
os.execv({sys.executable!r}, [{sys.executable!r}, *args])
"""


def project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A checkout with this pyproject.toml, a stand-in interpreter and its log."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    python = tmp_path / "python3"
    python.write_text(STAND_IN, encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return checkout, python, tmp_path / "calls.log"


def ensure_venv(checkout: Path, python: Path, log: Path, *arguments: str,
                pip_exit: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(python), "STAND_IN_LOG": str(log), "STAND_IN_PIP_EXIT": str(pip_exit)}
    command = f'. "{REPO}/scripts/venv.sh" && ensure_venv {" ".join(arguments)}'
    return subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_first_run_says_what_it_does_and_creates_an_isolated_environment(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    run = ensure_venv(checkout, python, log, ".venv", "test,bench")
    assert run.returncode == 0, run.stderr
    steps = [line for line in run.stdout.splitlines() if line.startswith("==> ")]
    assert len(steps) == 2, run.stdout
    assert steps[0].startswith("==> creating .venv with ") and "isolated: no system site-packages" in steps[0]
    assert steps[1].startswith("==> installing gpu-pod-exporter[test,bench] into .venv: ")
    assert " requirements and their dependencies" in steps[1]
    # no --system-site-packages; pip without -q, so its progress is shown
    assert calls(log) == ["venv .venv", "pip install --disable-pip-version-check -e .[test,bench]"]
    assert (checkout / ".venv" / "pyvenv.cfg").read_text() == "include-system-site-packages = false\n"


def test_a_second_run_installs_nothing_until_pyproject_changes(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    ensure_venv(checkout, python, log, ".venv")
    again = ensure_venv(checkout, python, log, ".venv")
    assert again.returncode == 0
    assert again.stdout.strip().splitlines() == [
        "==> .venv is up to date (pyproject.toml unchanged): nothing to install"]
    assert len(calls(log)) == 2
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n# changed\n")
    changed = ensure_venv(checkout, python, log, ".venv")
    assert "==> installing gpu-pod-exporter into .venv: " in changed.stdout
    assert calls(log)[-1] == "pip install --disable-pip-version-check -e ."


def test_other_extras_or_constraints_install_again(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    ensure_venv(checkout, python, log, ".venv")
    ensure_venv(checkout, python, log, ".venv", "test")
    assert calls(log)[-1] == "pip install --disable-pip-version-check -e .[test]"
    # fewer extras than installed (scripts/run after scripts/test): nothing to do
    fewer = ensure_venv(checkout, python, log, ".venv")
    assert fewer.stdout.strip() == "==> .venv is up to date (pyproject.toml unchanged): nothing to install"
    assert len(calls(log)) == 3
    (checkout / "floors.txt").write_text("pyyaml==6.0\n")
    pinned = ensure_venv(checkout, python, log, ".venv-floors", "test", "floors.txt")
    assert "pinned by floors.txt" in pinned.stdout
    assert calls(log)[-1] == "pip install --disable-pip-version-check -e .[test] -c floors.txt"


def test_a_failed_install_is_retried_next_time(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    failed = ensure_venv(checkout, python, log, ".venv", pip_exit=1)
    assert failed.returncode != 0
    retried = ensure_venv(checkout, python, log, ".venv")
    assert "==> installing" in retried.stdout and retried.returncode == 0


def test_an_environment_made_with_system_site_packages_is_rebuilt(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    old = checkout / ".venv"
    (old / "bin").mkdir(parents=True)
    shutil.copy(python, old / "bin" / "python")
    (old / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n")
    run = ensure_venv(checkout, python, log, ".venv")
    assert "==> recreating .venv: it was made with --system-site-packages" in run.stdout
    assert (old / "pyvenv.cfg").read_text() == "include-system-site-packages = false\n"


def cluster(checkout: Path, python: Path, log: Path, *arguments: str,
            pip_exit: int = 0) -> subprocess.CompletedProcess[str]:
    """``scripts/cluster ARGUMENTS`` run from a copy of the checkout's scripts."""
    scripts = checkout / "scripts"
    scripts.mkdir(exist_ok=True)
    for name in ("cluster", "venv.sh"):
        shutil.copy(REPO / "scripts" / name, scripts / name)
    env = {**os.environ, "PYTHON": str(python), "STAND_IN_LOG": str(log), "STAND_IN_PIP_EXIT": str(pip_exit)}
    return subprocess.run(["bash", str(scripts / "cluster"), *arguments], cwd=checkout, env=env,
                          capture_output=True, text=True, check=False, timeout=60)


def test_cluster_completes_an_install_that_was_interrupted(tmp_path: Path) -> None:
    """The interpreter exists but the install never finished (no stamp): scripts/cluster installs before
    it runs, instead of failing with ``No module named yaml`` on every later call."""
    checkout, python, log = project(tmp_path)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(python, checkout / ".venv" / "bin" / "python")
    (checkout / ".venv" / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    run = cluster(checkout, python, log, "up")
    assert run.returncode == 0, run.stderr
    assert calls(log) == ["pip install --disable-pip-version-check -e .[test]", "devcluster up"]
    assert "==> installing gpu-pod-exporter[test] into .venv: " in run.stderr  # stdout stays the tool's


def test_cluster_installs_nothing_when_the_environment_is_complete(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    assert ensure_venv(checkout, python, log, ".venv", "test,bench").returncode == 0
    run = cluster(checkout, python, log, "status")
    assert run.returncode == 0, run.stderr
    assert calls(log)[2:] == ["devcluster status"]  # after the venv and pip of the first install


def test_cluster_stops_when_its_install_fails(tmp_path: Path) -> None:
    checkout, python, log = project(tmp_path)
    run = cluster(checkout, python, log, "up", pip_exit=1)
    assert run.returncode != 0
    assert not any(call.startswith("devcluster") for call in calls(log))

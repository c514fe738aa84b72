"""The simulator is beside the product: ``exporter`` reaches ``simulator`` only through ``simulator.entry``.

The contract lives in pyproject.toml (``[tool.importlinter]``) and scripts/test runs ``lint-imports``
right after mypy. These tests show that it holds on the repository, that it catches a new import of
the simulator anywhere in the product, and what it is for: importing the exporter loads no simulator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # installed by the test extra (import-linter)
CONTRACT = "exporter must not import simulator"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages and pyproject.toml under ``root`` (nothing else on the path)."""
    environ = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=environ, capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_contract_is_kept_by_the_repository() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CONTRACT} KEPT" in result.stdout
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_an_import_of_the_simulator_from_the_product_breaks_the_contract(tmp_path: Path) -> None:
    for package in ("exporter", "simulator"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "exporter" / "units.py"
    module.write_text(module.read_text(encoding="utf-8") + "\nimport simulator.patterns  # noqa: E402\n",
                      encoding="utf-8")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert f"{CONTRACT} BROKEN" in result.stdout
    assert "exporter.units -> simulator.patterns" in result.stdout  # the offending import, named


def test_importing_the_exporter_loads_no_simulator() -> None:
    check = ("import exporter.cli, exporter.doctor.cli, sys; "
             "loaded = sorted(m for m in sys.modules if m == 'simulator' or m.startswith('simulator.')); "
             "assert not loaded, loaded")
    result = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr

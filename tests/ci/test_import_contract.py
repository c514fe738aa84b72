"""The import contracts: the simulator beside the product, the product's packages in layers, sources
through the hub.

The contracts live in pyproject.toml (``[tool.importlinter]``) and scripts/test runs ``lint-imports``
right after mypy. These tests show that every one holds on the repository, that each catches the import
it forbids (a new import of the simulator in the product, a lower package importing a higher one, which
is how an import cycle starts, a component reading the configuration instead of its own settings, and a
source reaching for the app), and what the first is for: importing the exporter loads no simulator.
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
LAYERS = "exporter packages form layers"
SOURCES = "optional sources do not import the app or the composition root"
SETTINGS = "components do not import the configuration"
CONTRACTS = (CONTRACT, LAYERS, SETTINGS, SOURCES)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages and pyproject.toml under ``root`` (nothing else on the path)."""
    environ = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=environ, capture_output=True,
                          text=True, timeout=300, check=False)


def test_every_contract_is_kept_by_the_repository() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in CONTRACTS:
        assert f"{contract} KEPT" in result.stdout
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def _with_import(tmp_path: Path, module: str, statement: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on a copy of the repository where ``module`` (a path under it) has one more import."""
    for package in ("exporter", "simulator"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{statement}  # noqa: E402\n", encoding="utf-8")
    return lint_imports(tmp_path)


def test_an_import_of_the_simulator_from_the_product_breaks_the_contract(tmp_path: Path) -> None:
    result = _with_import(tmp_path, "exporter/units.py", "import simulator.patterns")
    assert result.returncode != 0, result.stdout
    assert f"{CONTRACT} BROKEN" in result.stdout
    assert "exporter.units -> simulator.patterns" in result.stdout  # the offending import, named


def test_a_lower_package_importing_a_higher_one_breaks_the_layers(tmp_path: Path) -> None:
    """metrics importing nvml again (the cycle this contract removed) is named with its import."""
    result = _with_import(tmp_path, "exporter/metrics/render.py", "import exporter.nvml.peaks")
    assert result.returncode != 0, result.stdout
    assert f"{LAYERS} BROKEN" in result.stdout
    assert "exporter.metrics is not allowed to import exporter.nvml" in result.stdout
    assert "exporter.metrics.render -> exporter.nvml.peaks" in result.stdout


def test_a_source_reaching_for_the_app_breaks_the_hub_contract(tmp_path: Path) -> None:
    result = _with_import(tmp_path, "exporter/hpcjobs.py", "import exporter.app")
    assert result.returncode != 0, result.stdout
    assert f"{SOURCES} BROKEN" in result.stdout
    assert "exporter.hpcjobs -> exporter.app" in result.stdout


def test_importing_the_exporter_loads_no_simulator() -> None:
    check = ("import exporter.cli, exporter.doctor.cli, sys; "
             "loaded = sorted(m for m in sys.modules if m == 'simulator' or m.startswith('simulator.')); "
             "assert not loaded, loaded")
    result = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_a_component_reading_the_configuration_breaks_the_settings_contract(tmp_path: Path) -> None:
    """hpcjobs sits above config in the layers, but takes its settings from the composition root."""
    result = _with_import(tmp_path, "exporter/hpcjobs.py", "import exporter.config")
    assert result.returncode != 0, result.stdout
    assert f"{SETTINGS} BROKEN" in result.stdout
    assert f"{LAYERS} KEPT" in result.stdout
    assert "exporter.hpcjobs -> exporter.config" in result.stdout

"""The dependency floors in pyproject.toml are a tested fact, not a guess.

.ci/floors.txt pins every runtime dependency at exactly the lowest version pyproject.toml allows;
./scripts/test (under CI=true) installs the project with those pins into .venv-floors and runs the
unit tests there. These tests keep the two files in step, so raising a floor in one place only fails.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLOORS = REPO / ".ci" / "floors.txt"
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*(?P<version>[0-9][0-9A-Za-z.]*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Optional features of the product itself (not developer tools like test, bench or mutation).
RUNTIME_EXTRAS = ("report",)


def declared_floors() -> dict[str, str]:
    """Runtime dependency -> its lower bound; every dependency must be written ``name>=version``."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = [requirement for extra in RUNTIME_EXTRAS for requirement in project["optional-dependencies"][extra]]
    dependencies = [*project["dependencies"], *extras]
    floors: dict[str, str] = {}
    for requirement in dependencies:
        match = REQUIREMENT.match(requirement.strip())
        assert match, f"pyproject.toml: {requirement!r} needs exactly one lower bound (name>=version)"
        floors[canonical(match["name"])] = match["version"]
    return floors


def pinned_floors() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in FLOORS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f".ci/floors.txt: {line!r} is not a name==version pin"
            pins[canonical(name)] = version.strip()
    return pins


def test_every_runtime_dependency_is_pinned_at_its_declared_floor() -> None:
    assert pinned_floors() == declared_floors()


def test_the_ci_step_installs_the_floors_and_runs_the_unit_tests() -> None:
    script = (REPO / "scripts" / "test").read_text(encoding="utf-8")
    assert f"ensure_venv .venv-floors test,{','.join(RUNTIME_EXTRAS)} .ci/floors.txt" in script
    assert '.venv-floors/bin/python -m pytest -q -p no:cacheprovider -m "not e2e"' in script
    assert (REPO / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("exec ./scripts/test")

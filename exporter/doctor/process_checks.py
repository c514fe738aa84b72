"""Process attribution: is the host's PID namespace visible, is ``/proc/<pid>/cgroup`` readable, which cgroup version.

NVML reports host PIDs. The exporter maps each to its pod through ``<proc root>/<pid>/cgroup``
(``exporter.kube.processes``), which only works when the host's processes are visible: ``hostPID:
true`` or ``--proc-root`` at a host ``/proc`` mount. The evidence is NVML's own process list: if
those PIDs exist under the proc root, the namespace is right. With no GPU process running, PID 1's
name is the fallback clue (``systemd``/``init`` on a host, the entrypoint inside a container).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from exporter.config import Config
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.kube.processes import parse_cgroup_file
from exporter.snapshot import GpuProcess

SECTION = "processes"
HOST_INIT_NAMES = frozenset({"systemd", "init"})
PID_HINT = ("the exporter must see the host's processes: hostPID: true on its pod (the chart's "
            "processAttribution.enabled sets it) or --proc-root at a host /proc mount")
CGROUP_HINT = ("reading another process's /proc/<pid>/cgroup needs root in the host PID namespace: run the exporter "
               "as UID 0 with hostPID: true")


def check_processes(config: Config, processes: Mapping[int, tuple[GpuProcess, ...]], nvml_up: bool) -> list[Row]:
    if not (config.process_attribution or config.process_metrics):
        return [skipped(SECTION, "host pids", "process attribution is off (--kubernetes-process-attribution): "
                        "GPU memory is not split per container")]
    root = Path(config.proc_root)
    if not root.is_dir():
        return [failed(SECTION, "proc root", f"{root} is not a directory", f"--proc-root: {PID_HINT}",
                       proc_root=str(root))]
    pids = sorted({process.pid for listed in processes.values() for process in listed})
    rows = [_host_pid_row(root, pids, nvml_up)]
    rows.append(_cgroup_row(root, [pid for pid in pids if (root / str(pid)).is_dir()]))
    return rows


def _host_pid_row(root: Path, pids: list[int], nvml_up: bool) -> Row:
    if pids:
        visible = [pid for pid in pids if (root / str(pid)).is_dir()]
        text = f"{len(visible)} of {len(pids)} GPU processes visible under {root}"
        if len(visible) == len(pids):
            return ok(SECTION, "host pids", text, visible=visible, missing=[])
        missing = sorted(set(pids) - set(visible))
        if not visible:
            return failed(SECTION, "host pids", f"{text}: this is not the host's PID namespace", PID_HINT,
                          visible=[], missing=missing)
        return degraded(SECTION, "host pids", f"{text} (missing {', '.join(map(str, missing[:5]))}; they may "
                        "have exited meanwhile)", f"run the doctor again; if PIDs stay missing: {PID_HINT}",
                        visible=visible, missing=missing)
    try:
        init = (root / "1" / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        init = ""
    why = "no GPU process right now" if nvml_up else "NVML lists no process"
    if init in HOST_INIT_NAMES:
        return ok(SECTION, "host pids", f"{why}; PID 1 under {root} is {init}: the host's PID namespace")
    if init:
        return degraded(SECTION, "host pids", f"{why}, and PID 1 under {root} is {init!r}: this looks like the "
                        "container's own PID namespace", PID_HINT, pid1=init)
    return skipped(SECTION, "host pids", f"cannot tell: {why} and {root}/1 is not readable")


def _cgroup_row(root: Path, pids: list[int]) -> Row:
    if not pids:
        version = _version_of(_read(root / "self" / "cgroup") or _read(Path("/proc/self/cgroup")))
        return ok(SECTION, "cgroups", f"no GPU process to resolve; {version}", version=version)
    in_pods = 0
    unreadable: list[str] = []
    texts: list[str] = []
    for pid in pids:
        try:
            text = (root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            unreadable.append(f"{pid}: {exc.strerror or exc}")
            continue
        texts.append(text)
        if parse_cgroup_file(text) is not None:
            in_pods += 1
    version = _version_of(texts[0]) if texts else "cgroup version unknown"
    if unreadable and not texts:
        return failed(SECTION, "cgroups", f"cannot read /proc/<pid>/cgroup ({'; '.join(unreadable[:3])})",
                      CGROUP_HINT, version=version)
    text = f"{len(texts)} of {len(pids)} readable, {in_pods} in a pod's cgroup; {version}"
    if unreadable:
        return degraded(SECTION, "cgroups", f"{text} (unreadable: {'; '.join(unreadable[:3])})", CGROUP_HINT,
                        version=version, in_pods=in_pods)
    return ok(SECTION, "cgroups", text, version=version, in_pods=in_pods)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _version_of(text: str) -> str:
    """cgroup v2 lists one ``0::<path>`` line; v1 one line per hierarchy (a hybrid host has both)."""
    lines = [line for line in text.splitlines() if line.count(":") >= 2]
    if not lines:
        return "cgroup version unknown"
    unified = [line for line in lines if line.startswith("0::")]
    if len(lines) == len(unified):
        return "cgroup v2"
    return "cgroup v1 (hybrid)" if unified and unified[0] != "0::/" else "cgroup v1"

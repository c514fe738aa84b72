"""The screen as lines of text with a style each: what the terminal UI draws and ``--once`` prints.

Pure formatting, so the tests read exactly what a user reads. Styles: ``header``, ``idle``
(allocated but idle), ``bad`` (unhealthy or lost), ``down`` (a source that cannot be read), ``""``.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.top.model import GpuRow, PodRow, Screen
from exporter.top.sources import SourceError

Line = tuple[str, str]  # (style, text)


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def gpu_lines(rows: Sequence[GpuRow], show_cluster: bool) -> list[Line]:
    head = (f"{'CLUSTER':<12} " if show_cluster else "") + \
        f"{'NODE':<18} {'GPU':>3} {'MODEL':<22} {'UTIL%':>5} {'MEM GiB':>11} {'TEMP':>4} {'POWER':>6}  " \
        f"{'STATE':<16} PODS"
    lines: list[Line] = [("header", head)]
    for row in rows:
        if row.healthy is False:
            style, state = "bad", _cut("UNHEALTHY " + row.health_reason, 16)
        elif row.idle:
            style, state = "idle", "ALLOCATED IDLE"
        else:
            style, state = "", "in use" if row.allocated else "free"
        memory = f"{_gib(row.memory_used_mib)}/{_gib(row.memory_total_mib)}"
        pods = ",".join(sorted({f"{pod.namespace}/{pod.pod}" for pod in row.pods})) or "-"
        text = (f"{_cut(row.cluster, 12):<12} " if show_cluster else "") + \
            f"{_cut(row.node, 18):<18} {row.gpu:>3} {_cut(row.model.removeprefix('NVIDIA '), 22):<22} " \
            f"{_num(row.util_percent):>5} {memory:>11} {_num(row.temperature_c):>4} {_num(row.power_w, 'W'):>6}  " \
            f"{state:<16} {pods}"
        lines.append((style, text))
    return lines


def pod_lines(rows: Sequence[PodRow], show_cluster: bool) -> list[Line]:
    head = (f"{'CLUSTER':<12} " if show_cluster else "") + \
        f"{'NAMESPACE':<14} {'POD':<24} {'CONTAINER':<14} {'TEAM':<12} {'NODE':<18} {'GPU':<8} {'UTIL%':>5} " \
        f"{'MEM GiB':>7}  STATE"
    lines: list[Line] = [("header", head)]
    for row in rows:
        text = (f"{_cut(row.cluster, 12):<12} " if show_cluster else "") + \
            f"{_cut(row.namespace, 14):<14} {_cut(row.pod, 24):<24} {_cut(row.container, 14):<14} " \
            f"{_cut(row.team, 12) or '-':<12} {_cut(row.node, 18):<18} {row.gpu:<8} {_num(row.util_percent):>5} " \
            f"{_gib(row.memory_mib):>7}  {'IDLE' if row.idle else ''}"
        lines.append(("idle" if row.idle else "", text.rstrip()))
    return lines


def status_lines(errors: Sequence[SourceError]) -> list[Line]:
    return [("down", f"SOURCE DOWN {error.source}: {error.message.splitlines()[0]}") for error in errors]


def summary(screen: Screen) -> str:
    idle = sum(1 for row in screen.gpus if row.idle)
    bad = sum(1 for row in screen.gpus if row.healthy is False)
    allocated = sum(1 for row in screen.gpus if row.allocated)
    return (f"{len(screen.gpus)} GPUs, {allocated} allocated, {idle} allocated but idle, {bad} unhealthy; "
            f"{len(screen.pods)} pod containers")

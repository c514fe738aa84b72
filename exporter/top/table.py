"""The screen as lines of text with a style each: what the terminal UI draws and ``--once`` prints.

Pure formatting, so the tests read exactly what a user reads. Styles: ``header``, ``idle``
(allocated but idle, or a warning), ``bad`` (unhealthy, lost, or a critical condition), ``stale``
(data older than its bound, or kept from a source that is down), ``down`` (a source that cannot be
read), ``""``.

Three rules hold at every width:

* **Every label is printable.** Any value that came from a cluster (a pod name, a label, a reason,
  an error message) goes through ``printable`` before it is drawn: a control character such as the
  ESC of ``\\x1b]0;title\\x07`` is shown escaped, so a hostile label cannot retitle or redraw the
  terminal (``top --once`` included).
* **STATE and the reasons are never cut.** Each GPU's conditions are lines of their own under its
  row, wrapped to the width; the columns drop by ``priority`` (the lowest kept longest) until the
  rest fits, and PODS takes what is left: the pod names that fit whole and ``+N`` for the others.
  The title and key-hint bars drop their parts by priority the same way (``fit_parts``).
* **Time is shown.** The AGE column says how old each node's data is and ``STALE`` past its bound;
  a node kept from a source that is down says when it was last seen.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter.top.lastseen import Freshness, NodeKey, freshness_of
from exporter.top.model import Condition, GpuRow, NodeView, PodRow, Screen, _conditions
from exporter.top.sources import Reading, SourceError

Line = tuple[str, str]  # (style, text)
Block = list[Line]  # one GPU or pod: its row, then its condition lines
STATE_WIDTH = 20  # the GPU list's STATE column: "ALLOCATED IDLE", "UNHEALTHY fatal_xid"
PODS_MIN = 12  # PODS never narrower than this; it takes the width the other columns leave
CONDITION_INDENT = "    "


def printable(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1, and the bidirectional overrides that reorder
    what a terminal shows) written as a visible escape, e.g. ``\\x1b``."""
    return "".join(_escape(char) if _is_control(char) else char for char in text)


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or 0x200E <= code <= 0x200F or 0x202A <= code <= 0x202E \
        or 0x2066 <= code <= 0x2069


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f}"


def _cut(text: str, width: int) -> str:
    text = printable(text)
    return text if len(text) <= width else text[:width - 1] + "~"


def age_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def clock_text(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


def _age_cell(fresh: Freshness | None) -> str:
    if fresh is None or fresh.age_s is None:
        return "STALE" if fresh is not None and fresh.stale else "-"
    return ("STALE " if fresh.stale else "") + age_text(fresh.age_s)


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # 0: the flexible last column
    priority: int  # columns drop highest first when the width is short; 0 never drops
    right: bool = False


GPU_COLUMNS = (
    Column("CLUSTER", 12, 4), Column("NODE", 18, 3), Column("GPU", 3, 0, right=True), Column("MODEL", 22, 9),
    Column("UTIL%", 5, 2, right=True), Column("MEM GiB", 11, 6, right=True), Column("TEMP", 4, 7, right=True),
    Column("POWER", 6, 8, right=True), Column("AGE", 9, 1, right=True), Column("STATE", STATE_WIDTH, 0),
    Column("PODS", 0, 5),
)
POD_COLUMNS = (
    Column("CLUSTER", 12, 4), Column("NAMESPACE", 14, 1), Column("POD", 24, 0), Column("CONTAINER", 14, 6),
    Column("TEAM", 12, 7), Column("NODE", 18, 5), Column("GPU", 8, 3), Column("UTIL%", 5, 2, right=True),
    Column("MEM GiB", 7, 8, right=True), Column("AGE", 9, 1, right=True), Column("STATE", 0, 0),
)


@dataclass(frozen=True)
class Part:
    """A piece of a one-line bar (the title, the key hints) and how long it stays when the width is short."""

    text: str
    priority: int  # parts drop highest first when the width is short; 0 never drops


Prioritised = TypeVar("Prioritised", Column, Part)


def _drop_by_priority(items: Sequence[Prioritised], needed: Callable[[Sequence[Prioritised]], int],
                      width: int | None) -> list[Prioritised]:
    """``items`` less the highest ``priority`` ones (the rightmost first among equals) until ``needed`` of
    the rest fits ``width`` (None: all kept); those of priority 0 always stay."""
    kept = list(items)
    while width is not None and needed(kept) > width:
        droppable = [item for item in kept if item.priority > 0]
        if not droppable:
            break
        kept.remove(max(droppable, key=lambda item: (item.priority, kept.index(item))))
    return kept


def layout(columns: Sequence[Column], width: int | None, show_cluster: bool) -> list[Column]:
    """The columns that fit ``width`` (None: all), dropping the highest ``priority`` first."""
    shown = [column for column in columns if show_cluster or column.title != "CLUSTER"]
    return _drop_by_priority(shown, lambda chosen: sum((column.width or PODS_MIN) + 1 for column in chosen) - 1,
                             width)


def fit_parts(parts: Sequence[Part], width: int | None, separator: str) -> str:
    """The parts joined by ``separator``, less the lowest-priority ones until the line fits ``width``. What
    stays may still be longer (parts of priority 0 never drop): the title then wraps, never clips."""
    kept = _drop_by_priority(parts, lambda chosen: len(separator.join(part.text for part in chosen)), width)
    return separator.join(part.text for part in kept)


def _flex_width(columns: Sequence[Column], width: int | None) -> int:
    """The width left to the flexible column (0: unbounded, no terminal width)."""
    used = sum(column.width + 1 for column in columns if column.width)
    return max(PODS_MIN, width - used) if width is not None else 0


def pods_cell(names: Sequence[str], width: int) -> str:
    """The PODS cell: the pod names that fit whole, then ``+N`` for the N that do not (``ml/train-0 +3``);
    never a name cut mid-way. When not even one fits, the count (``4 pods``). ``width`` 0: every name."""
    shown = [printable(name) for name in names]
    if not shown:
        return "-"
    for count in range(len(shown), 0, -1):
        rest = len(shown) - count
        text = ",".join(shown[:count]) + (f" +{rest}" if rest else "")
        if not width or len(text) <= width:
            return text
    total = f"{len(shown)} pod{'s' if len(shown) > 1 else ''}"
    return total if len(total) <= width else f"+{len(shown)}"


def _render(columns: Sequence[Column], cells: Mapping[str, str], width: int | None) -> str:
    parts = []
    for column in columns:
        size = column.width or _flex_width(columns, width)
        text = cells[column.title]
        if size:
            text = _cut(text, size)
            text = text.rjust(size) if column.right else text.ljust(size)
        else:
            text = printable(text)
        parts.append(text)
    return " ".join(parts).rstrip()


def header(columns: Sequence[Column], width: int | None) -> str:
    return _render(columns, {column.title: column.title for column in columns}, width)


def _severity_style(severity: str) -> str:
    return "bad" if severity == "critical" else "idle"


def _condition_lines(conditions: Sequence[Condition], width: int | None) -> list[Line]:
    lines: list[Line] = []
    for condition in conditions:
        text = f"{condition.severity.upper()}: {condition.text}" + (f" [{condition.alert}]" if condition.alert else "")
        text = printable(text)
        wrapped = textwrap.wrap(text, width - len(CONDITION_INDENT) - 2) if width else [text]
        lines.extend((_severity_style(condition.severity), CONDITION_INDENT + ("" if i == 0 else "  ") + part)
                     for i, part in enumerate(wrapped))
    return lines


def _gpu_state(row: GpuRow) -> tuple[str, str]:
    """The STATE cell: ``UNHEALTHY <reason>`` when the reason fits the column, else ``UNHEALTHY`` alone (the
    reason then stands whole on its own line under the row: never cut)."""
    severities = {condition.severity for condition in row.conditions}
    if row.healthy is False:
        state = f"UNHEALTHY {row.health_reason}"
        return "bad", state if len(state) <= STATE_WIDTH else "UNHEALTHY"
    if "critical" in severities:
        return "bad", "CRITICAL"
    if row.idle:
        return "idle", "ALLOCATED IDLE"
    if severities:
        return "idle", "WARNING"
    return "", "in use" if row.allocated else "free"


def gpu_blocks(rows: Sequence[GpuRow], show_cluster: bool, width: int | None = None,
               ages: Mapping[NodeKey, Freshness] | None = None) -> tuple[str, list[Block]]:
    """The column header and one block per GPU: its row, then a line per condition with its reason."""
    columns = layout(GPU_COLUMNS, width, show_cluster)
    blocks: list[Block] = []
    for row in rows:
        fresh = (ages or {}).get((row.cluster, row.node))
        style, state = _gpu_state(row)
        cells = {
            "CLUSTER": row.cluster, "NODE": row.node, "GPU": str(row.gpu), "MODEL": row.model.removeprefix("NVIDIA "),
            "UTIL%": _num(row.util_percent), "MEM GiB": f"{_gib(row.memory_used_mib)}/{_gib(row.memory_total_mib)}",
            "TEMP": _num(row.temperature_c), "POWER": _num(row.power_w, "W"), "AGE": _age_cell(fresh),
            "STATE": state,
            "PODS": pods_cell(sorted({f"{pod.namespace}/{pod.pod}" for pod in row.pods}), _flex_width(columns, width)),
        }
        block: Block = [(style, _render(columns, cells, width))]
        block += _condition_lines(row.conditions, width)
        if row.healthy is False and not any(c.id == "unhealthy" for c in row.conditions) and (
                state == "UNHEALTHY" or not any(c.severity == "critical" for c in row.conditions)):
            block += _condition_lines([Condition("health", "", "critical", f"unhealthy: {row.health_reason}")],
                                      width)
        if fresh is not None and fresh.stale:
            block = [("stale", text) for _, text in block]
        blocks.append(block)
    return header(columns, width), blocks


def pod_blocks(rows: Sequence[PodRow], show_cluster: bool, width: int | None = None,
               ages: Mapping[NodeKey, Freshness] | None = None) -> tuple[str, list[Block]]:
    columns = layout(POD_COLUMNS, width, show_cluster)
    blocks: list[Block] = []
    for row in rows:
        fresh = (ages or {}).get((row.cluster, row.node))
        cells = {"CLUSTER": row.cluster, "NAMESPACE": row.namespace, "POD": row.pod, "CONTAINER": row.container,
                 "TEAM": row.team or "-", "NODE": row.node, "GPU": row.gpu, "UTIL%": _num(row.util_percent),
                 "MEM GiB": _gib(row.memory_mib), "AGE": _age_cell(fresh), "STATE": "IDLE" if row.idle else ""}
        style = "stale" if fresh is not None and fresh.stale else "idle" if row.idle else ""
        blocks.append([(style, _render(columns, cells, width))])
    return header(columns, width), blocks


def _flatten(head: str, blocks: Sequence[Block]) -> list[Line]:
    return [("header", head), *(line for block in blocks for line in block)]


def gpu_lines(rows: Sequence[GpuRow], show_cluster: bool, width: int | None = None,
              ages: Mapping[NodeKey, Freshness] | None = None) -> list[Line]:
    """The header, then each GPU's row and condition lines (``--once``)."""
    return _flatten(*gpu_blocks(rows, show_cluster, width, ages))


def pod_lines(rows: Sequence[PodRow], show_cluster: bool, width: int | None = None,
              ages: Mapping[NodeKey, Freshness] | None = None) -> list[Line]:
    return _flatten(*pod_blocks(rows, show_cluster, width, ages))


def status_lines(errors: Sequence[SourceError], last_seen: Mapping[NodeKey, float] | None = None,
                 node_conditions: Mapping[NodeKey, Sequence[Condition]] | None = None,
                 now: Callable[[], float] = time.time) -> list[Line]:
    """A line per source that is down, per node kept from it (last seen when), per node-level condition."""
    lines: list[Line] = [("down", f"SOURCE DOWN {printable(error.source)}: "
                                  f"{printable(error.message.splitlines()[0] if error.message else '')}")
                         for error in errors]
    at = now()
    for (cluster, node), seen in (last_seen or {}).items():
        where = printable("/".join(part for part in (cluster, node) if part))
        lines.append(("stale", f"STALE {where}: last seen {clock_text(seen)} ({age_text(at - seen)} ago); "
                               "its rows are the last ones read"))
    for (cluster, node), conditions in (node_conditions or {}).items():
        where = printable("/".join(part for part in (cluster, node) if part))
        for condition in conditions:
            lines.append((_severity_style(condition.severity),
                          f"NODE {where} {condition.severity.upper()}: {printable(condition.text)}"
                          + (f" [{printable(condition.alert)}]" if condition.alert else "")))
    return lines


def summary(screen: Screen, ages: Mapping[NodeKey, Freshness] | None = None) -> str:
    idle = sum(1 for row in screen.gpus if row.idle)
    bad = sum(1 for row in screen.gpus if row.healthy is False)
    allocated = sum(1 for row in screen.gpus if row.allocated)
    stale = sum(1 for row in screen.gpus if (fresh := (ages or {}).get((row.cluster, row.node))) and fresh.stale)
    known = [fresh.age_s for fresh in (ages or {}).values() if fresh.age_s is not None]
    low, high = (age_text(min(known)), age_text(max(known))) if known else ("", "")
    age = "" if not known else f"; data {low} old" if low == high else f"; data {low}-{high} old"
    return (f"{len(screen.gpus)} GPUs, {allocated} allocated, {idle} allocated but idle, {bad} unhealthy"
            f"{f', {stale} STALE' if stale else ''}; {len(screen.pods)} pod containers{age}")


def node_conditions(nodes: Sequence[NodeView]) -> dict[NodeKey, tuple[Condition, ...]]:
    """The node-level conditions (the exporter's own: sampler stalled, data stale, kubelet down, ...)."""
    found = {(node.cluster, node.node): _conditions(node.view.get("conditions")) for node in nodes}
    return {key: conditions for key, conditions in found.items() if conditions}


def once_text(reading: Reading, shown: Screen, view: str, now: float | None = None) -> str:
    """``top --once``: the summary, the status lines, the table, every column (no terminal width)."""
    ages = freshness_of(reading.nodes, time.time() if now is None else now)
    lines = status_lines(reading.errors, node_conditions=node_conditions(reading.nodes))
    lines += gpu_lines(shown.gpus, bool(shown.clusters), None, ages) if view == "gpus" else \
        pod_lines(shown.pods, bool(shown.clusters), None, ages)
    return summary(shown, ages) + "\n" + "".join(text.rstrip() + "\n" for _, text in lines)

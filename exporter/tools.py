"""The tools shipped beside the exporter, each run as ``gpu-pod-exporter <tool> ...``: one table.

``cli.main`` dispatches on it (each module has ``main(argv) -> int`` and is imported only when asked
for, so no tool slows down the exporter) and ``config.build_parser`` lists it in ``--help``, so a tool
added here is both runnable and named to the user; a tool missing from ``--help`` is how users never
found ``doctor``.
"""

from __future__ import annotations

from typing import NamedTuple


class Tool(NamedTuple):
    module: str
    summary: str


TOOLS: dict[str, Tool] = {
    "doctor": Tool("exporter.doctor.cli", "check what the exporter on this node needs and say how to fix it"),
    "report": Tool("exporter.report.cli", "GPU cost and waste per team or namespace, from Prometheus"),
    "remediate": Tool("exporter.remediate.cli", "act on alerts about unhealthy GPUs: node Events, taints, conditions"),
    "top": Tool("exporter.top.cli", "GPUs and the pods on them in the terminal, busiest first"),
}


def tools_help() -> str:
    """The ``--help`` paragraph naming every tool."""
    width = max(map(len, TOOLS))
    lines = [f"  {name.ljust(width)}  {tool.summary}" for name, tool in TOOLS.items()]
    return "tools (gpu-pod-exporter TOOL --help):\n" + "\n".join(lines)

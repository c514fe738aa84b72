"""docs/extending.md: the three "how to add" paths name files that exist and registration points that are there.

Each row of a "How to add" table names a file (first backticks of its first cell) and the name to look
for in it (first backticks of its second cell). For Python files the name must be defined there (a
``def``, a ``class`` or an assignment); elsewhere it must appear. A renamed registry or a moved module
fails here, naming the row, instead of leaving the guide wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.composition import optional_sources, resolve
from exporter.config import load_config
from exporter.hpcjobs import HpcJobMapping
from exporter.hub import Hub, SamplerSettings
from exporter.metrics.counters import load_counters
from exporter.metrics.render import RenderOptions

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "extending.md"
PATHS = ("How to add a metric", "How to add a subcommand", "How to add a pod label source")
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| `(?P<name>[^`]+)`")


def _sections() -> dict[str, str]:
    text = GUIDE.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    return {part.splitlines()[0].strip(): part for part in parts[1:]}


def _rows(section: str) -> list[tuple[str, str]]:
    return [(match["file"], match["name"]) for line in section.splitlines() if (match := _ROW.match(line))]


def _defines(text: str, name: str) -> bool:
    if name.endswith("_"):  # a prefix: test functions
        return re.search(rf"^def {re.escape(name)}\w+", text, re.MULTILINE) is not None
    return re.search(rf"^\s*(?:def|class) {re.escape(name)}\b|^{re.escape(name)}\s*(?::[^=]*)?=",
                     text, re.MULTILINE) is not None


def test_the_guide_has_the_three_paths_each_with_its_files() -> None:
    sections = _sections()
    for path in PATHS:
        assert path in sections, f"docs/extending.md has no section '## {path}'"
        assert len(_rows(sections[path])) >= 3, f"'{path}' lists fewer than three files"


@pytest.mark.parametrize(("path", "file", "name"), [
    (path, file, name) for path, section in _sections().items() if path in PATHS for file, name in _rows(section)])
def test_each_listed_file_exists_and_has_its_registration_point(path: str, file: str, name: str) -> None:
    target = REPO / file
    assert target.is_file(), f"{path}: {file} does not exist"
    text = target.read_text(encoding="utf-8")
    if target.suffix == ".py":
        assert _defines(text, name), f"{path}: {file} does not define {name}"
    else:
        assert name in text, f"{path}: {file} does not contain {name!r}"


def test_the_worked_label_source_installs_through_the_one_registration_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guide's example, --hpc-job-mapping-dir, is built by the composition root and registers a label
    source with the hub (and nothing is attached to an app)."""
    config = load_config(["--hpc-job-mapping-dir", str(tmp_path)], {})
    counters = load_counters(None)
    hub = Hub(counters, SamplerSettings(1.0, None, 60.0), RenderOptions(hostname="n"))
    sources = optional_sources(resolve(config), counters)
    assert [type(source).__name__ for source in sources] == ["HpcJobMapping", "UnknownDeviceIds", "HealthTelemetry"]
    registered: list[object] = []
    monkeypatch.setattr(hub, "add_label_source", registered.append)
    for source in sources:
        source.install(hub)
    mapping = sources[0]
    assert isinstance(mapping, HpcJobMapping) and registered == [mapping.labeler]


def test_a_tool_added_to_the_one_table_is_run_and_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subcommand path as the guide tells it: one entry in exporter/tools.py, nothing else to wire,
    and ``gpu-pod-exporter <tool>`` runs it while ``--help`` names it."""
    import sys  # noqa: PLC0415 - only this test plants a module
    import types  # noqa: PLC0415

    from exporter import cli, tools  # noqa: PLC0415
    from exporter.config import build_parser  # noqa: PLC0415

    planted = types.ModuleType("planted_tool_cli")
    planted.main = lambda argv: 40 + len(argv)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "planted_tool_cli", planted)
    monkeypatch.setitem(tools.TOOLS, "planted", tools.Tool("planted_tool_cli", "a tool planted by the test"))
    assert cli.main(["planted", "a", "b"]) == 42
    assert re.search(r"^  planted +a tool planted by the test$", build_parser().format_help(), re.MULTILINE)

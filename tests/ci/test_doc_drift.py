"""The documents stay true to the repository: each kind of drift found once has a test that fails on it.

* a link in a document to a file that is not in the repository (a design file in the workspace, a
  renamed document): the reader gets a 404;
* a figure quoted in two documents that differ (README's RSS against docs/benchmarks.md's);
* a systemd unit or a repository file named in the documents that is not shipped (a ``.socket`` unit);
* a tool the exporter ships that ``--help`` or README's Design section does not name (``doctor`` and
  ``remediate`` were missing from both).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.tools import TOOLS
from tests.support.paths import REPO_ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)")
UNIT = re.compile(r"(?<![\w/.-])([\w@-]*)\.(socket|service|timer)\b")
# A repository path in backticks: starts with a top-level folder of the repository.
TOP_LEVEL = ("bench", "deploy", "devcluster", "docs", "etc", "exporter", "scripts", "simulator", "tests", "tools",
             "upstream")
REPO_PATH = re.compile(r"`((?:" + "|".join(TOP_LEVEL) + r")/[\w./@-]*[\w/])`")


def tracked_documents() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=REPO_ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    return [REPO_ROOT / name for name in names if name]


def broken_links(document: Path, text: str) -> list[str]:
    """Links of ``text`` (a document at ``document``) to files that are not in the repository."""
    broken = []
    for target in LINK.findall(text):
        if EXTERNAL.match(target):
            continue
        path = (document.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(REPO_ROOT) or not path.exists():
            broken.append(target)
    return broken


def test_every_link_in_the_documents_opens_a_file_of_the_repository() -> None:
    found = [f"{doc.relative_to(REPO_ROOT)}: {target}" for doc in tracked_documents()
             for target in broken_links(doc, doc.read_text(encoding="utf-8"))]
    assert found == [], "links to files that are not in the repository:\n" + "\n".join(found)


def test_a_link_out_of_the_repository_or_to_a_missing_file_is_caught() -> None:
    readme = REPO_ROOT / "README.md"
    outside = "../" + "shared/DESIGN.md"  # spelled apart: tests/ci/test_citations.py refuses the path itself
    assert broken_links(readme, f"[design]({outside}) [gone](docs/no-such.md#x)") == [outside, "docs/no-such.md#x"]
    assert broken_links(readme, "[ok](docs/install.md#systemd) [web](https://example.com/x.md) [a](#design)") == []


def named_but_not_shipped(text: str) -> list[str]:
    """Units and repository paths ``text`` names that the repository does not ship."""
    missing = []
    units = REPO_ROOT / "deploy" / "systemd"
    for name, kind in UNIT.findall(text):
        shipped = sorted(units.glob(f"{name or '*'}.{kind}"))
        if not shipped:
            missing.append(f"{name}.{kind}")
    for path in REPO_PATH.findall(text):
        if "*" not in path and not (REPO_ROOT / path).exists():
            missing.append(path)
    return missing


def test_every_unit_and_file_the_documents_name_is_shipped() -> None:
    found = [f"{doc.relative_to(REPO_ROOT)}: {name}" for doc in tracked_documents()
             for name in named_but_not_shipped(doc.read_text(encoding="utf-8"))]
    assert found == [], "named in the documents, not in the repository:\n" + "\n".join(found)


def test_a_unit_or_file_that_is_not_shipped_is_caught() -> None:
    assert named_but_not_shipped("socket-activated with a `.socket` unit") == [".socket"]
    assert named_but_not_shipped("install `deploy/systemd/gpu-pod-exporter.socket`") == [
        "deploy/systemd/gpu-pod-exporter.socket"]
    assert named_but_not_shipped("enable gpu-pod-exporter.socket") == ["gpu-pod-exporter.socket"]
    assert named_but_not_shipped("`deploy/systemd/gpu-pod-exporter.service`, nvidia-persistenced.service") == [
        "nvidia-persistenced.service"]
    assert named_but_not_shipped("`scripts/test` and `docs/testing.md`") == []


# A figure quoted in more than one document: (what, [(document, pattern with one group: the figure)]).
# The first document is where the figure is measured; every other one must quote it unchanged.
QUOTED_FIGURES = [
    ("the newest peak RSS at 64 GPUs and 110 pods, MiB", [
        ("docs/benchmarks.md",
         r"<!-- peaks-ab-full-repeat:start -->.*?\| RSS peak \(VmHWM\), MiB \| [\d.]+ \| ([\d.]+) \|"),
        ("README.md", r"peak RSS ([\d.]+) MiB at 64 GPUs and 110 pods"),
    ]),
    ("the full matrix run's largest peak RSS, MiB", [
        ("docs/benchmarks.md", r"\| RSS \| <= 80 MiB \| [^|]+ \| largest peak \(VmHWM\) of any run: ([\d.]+) MiB"),
        ("README.md", r"the last full benchmark matrix peaked at ([\d.]+) MiB"),
    ]),
    ("the RSS target, MiB", [
        ("docs/benchmarks.md", r"\| RSS \| <= (\d+) MiB \|"),
        ("README.md", r"within our (\d+) MiB target"),
    ]),
]


def quoted(text: str, pattern: str) -> list[str]:
    return [match.group(1) for match in re.finditer(pattern, text, re.DOTALL)]


@pytest.mark.parametrize(("what", "places"), QUOTED_FIGURES, ids=[what for what, _ in QUOTED_FIGURES])
def test_a_figure_quoted_in_two_documents_is_the_same_in_both(what: str, places: list[tuple[str, str]]) -> None:
    found = {name: quoted((REPO_ROOT / name).read_text(encoding="utf-8"), pattern) for name, pattern in places}
    assert all(len(values) == 1 for values in found.values()), f"{what}: each document quotes it once: {found}"
    assert len({values[0] for values in found.values()}) == 1, f"{what} differs between the documents: {found}"


def test_a_figure_that_differs_between_documents_is_caught() -> None:
    pattern = QUOTED_FIGURES[0][1][1][1]
    assert quoted("peak RSS 93.5 MiB at 64 GPUs and 110 pods", pattern) == ["93.5"]
    assert quoted("| RSS | <= 80 MiB | **no** | largest peak (VmHWM) of any run: 93.5 MiB at 64 GPUs",
                  QUOTED_FIGURES[1][1][0][1]) == ["93.5"]


def test_help_lists_every_tool() -> None:
    result = subprocess.run([sys.executable, "-m", "exporter", "--help"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    listed = re.findall(r"^  (\w+)  +\S", result.stdout.split("tools (gpu-pod-exporter TOOL --help):", 1)[-1], re.M)
    assert listed == list(TOOLS)
    assert set(TOOLS) == {"doctor", "report", "remediate", "top"}  # every package with a cli.py main


def test_every_tool_package_is_a_tool() -> None:
    """A package of exporter/ with a ``cli.py`` is a tool users run: it must be in the table --help lists."""
    packages = {path.parent.name for path in (REPO_ROOT / "exporter").glob("*/cli.py")}
    assert packages == set(TOOLS), "add the tool to exporter/tools.py"


def test_readme_design_names_every_tool() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    design = readme.split("\n## Design\n", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in TOOLS if f"`exporter/{name}`" not in design]
    assert missing == [], f"README's Design section does not name {missing}"

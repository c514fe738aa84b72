"""Comments and documents cite what a reader can open: the project's own files or public sources.

The research notes the code was first written from are not shipped, so a citation of them ("reference
nvml.md §5.3", the notes' source key for nvml.h) points nowhere: each one was replaced by the fact it
stood for, with its public source.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = frozenset({".py", ".md", ".yaml", ".yml", ".txt", ".proto", ".json", ".tpl", ".sh", ""})
NOTES = ("nvml", "dcgm-exporter", "dcgm-names", "podresources", "platform", "style-and-practice", "turn2-facts")
# "reference/nvml.md", "reference nvml.md §5.3", "(dcgm-exporter.md §7)": a note by name; and the notes' key "[H]"
# for nvml.h. A shipped document may end like a note (docs/migrate-from-dcgm-exporter.md): not preceded by - or /.
CITATION = re.compile(r"(?<![\w/-])(?:shared/reference/|reference[/ ])?(?:" + "|".join(map(re.escape, NOTES))
                      + r")\.md(?:,? ?(?:§|section) ?[\dA-Z][\d.]*)?|\[H\]")


# A file of the workspace the repository was written in (its design notes, another checkout): no reader has it.
OUTSIDE = re.compile(r"(?:\.\./)+shared/[\w./-]*|/work/(?:shared|main|wt-[\w-]+)/[\w./-]*")


def outside_citations(text: str) -> list[str]:
    return OUTSIDE.findall(text)


def cited_notes(text: str) -> list[str]:
    return [match.group(0).rstrip(".") for match in CITATION.finditer(text)]


def test_no_file_cites_the_unshipped_research_notes() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    found: list[str] = []
    for name in tracked.decode().split("\0"):
        path = REPO / name
        if not name or path == Path(__file__).resolve() or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found.extend(f"{name}: {cited}" for cited in cited_notes(text) + outside_citations(text))
    assert found == [], "replace each citation by the fact it stands for, with its public source:\n" + "\n".join(found)


def test_the_check_tells_a_note_from_a_shipped_document() -> None:
    assert cited_notes("NVML calls serialize (reference nvml.md §5.3)") == ["reference nvml.md §5.3"]
    assert cited_notes("see reference/podresources.md") == ["reference/podresources.md"]
    assert cited_notes("zero when MIG is off ([H])") == ["[H]"]
    assert cited_notes("(dcgm-exporter.md §6 flags)") == ["dcgm-exporter.md §6"]
    assert cited_notes("see docs/migrate-from-dcgm-exporter.md and dcgm-exporter's README") == []


def test_the_check_tells_a_workspace_file_from_a_shipped_one() -> None:
    assert outside_citations("`../shared/DESIGN.md` in the project workspace") == ["../shared/DESIGN.md"]
    assert outside_citations("see /work/shared/reference/nvml.md") == ["/work/shared/reference/nvml.md"]
    assert outside_citations("see docs/testing.md and deploy/shared/values.yaml") == []

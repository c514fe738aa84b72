"""docs/benchmarks.md: every figure comes from a committed results file (bench/docs.py)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from bench import docs

DOCUMENT = docs.DOCS / docs.DOCUMENT


def test_the_committed_document_is_what_its_committed_results_files_give():
    assert docs.check(DOCUMENT.read_text(encoding="utf-8"), docs.DOCS) == []


def test_every_section_is_generated_from_a_file_under_version_control():
    if shutil.which("git") is None:
        pytest.fail("git is needed to tell committed results files from stray ones")
    tracked = subprocess.run(["git", "ls-files", "docs"], cwd=docs.DOCS.parent, capture_output=True, text=True,
                             check=True).stdout.split()
    for section in docs.SECTIONS:
        assert f"docs/{section.results}" in tracked, section.results
        start, end = docs.markers(section.name)
        assert start in DOCUMENT.read_text(encoding="utf-8") and end in DOCUMENT.read_text(encoding="utf-8")


@pytest.mark.parametrize("typed", ["about ~15 % more throughput", "ranges of 0.19-0.23 ms", "import costs 12.2 MiB",
                                   "1,403 failed", "-3.6 % after ten minutes"])
def test_a_figure_typed_into_the_prose_is_caught(typed: str):
    document = DOCUMENT.read_text(encoding="utf-8").replace("## Reading the results\n",
                                                            f"## Reading the results\n\n{typed}.\n", 1)
    problems = docs.check(document, docs.DOCS)
    assert problems and all(problem.startswith("figure typed by hand in the prose") for problem in problems)


def test_a_figure_edited_inside_a_generated_section_is_caught():
    document = DOCUMENT.read_text(encoding="utf-8")
    start, end = docs.markers("counters")
    before, rest = document.split(start, 1)
    body, after = rest.split(end, 1)
    edited = body.replace("| NVML calls per GPU per cycle | ", "| NVML calls per GPU per cycle | 9", 1)
    assert edited != body
    assert docs.check(before + start + edited + end + after, docs.DOCS) == [
        "section counters: differs from what docs/benchmarks-counters.json gives (run `python -m bench docs`)"]


def test_the_harness_settings_are_the_only_numbers_the_prose_may_state():
    allowed = docs.method_numbers()
    assert allowed["110"] == "bench.suite.POD_COUNTS"
    assert "10" in allowed  # the scrape timeout, in s (and the start-up poll, in ms)
    assert "20" in allowed  # the PCIe sampling window, in ms
    assert docs.hand_typed_numbers("8 GPUs, 110 pods, 64 scrapers, H100, issue #14, commit 6f74927") == []
    assert docs.hand_typed_numbers("no number here <!-- x:start -->\n42\n<!-- x:end -->") == []


def test_regenerating_rewrites_a_stale_section(tmp_path: Path):
    for section in docs.SECTIONS:
        shutil.copy(docs.DOCS / section.results, tmp_path / section.results)
    document = DOCUMENT.read_text(encoding="utf-8")
    start, end = docs.markers("dcgm-published")
    stale = document.split(start, 1)[0] + start + "\nold\n" + end + document.split(end, 1)[1]
    assert docs.check(stale, tmp_path) != []
    assert docs.regenerate(stale, tmp_path) == document

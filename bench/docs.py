"""docs/benchmarks.md: every figure in it is generated from a committed results file.

    python -m bench docs            # rewrite every generated section from its results file
    python -m bench docs --check    # exit 1, naming each problem, when the document is not what they give

The document is prose around marked sections (``<!-- NAME:start -->`` ... ``<!-- NAME:end -->``).
Each section is written by a renderer from one results file under docs/ (``SECTIONS``), so its
numbers can be traced to the run that measured them (each file records when, and at which commit).
The prose around the sections states no measured figure: the only numbers it may contain are the
harness's own settings (GPU and pod counts, windows, the scrape timeout, pinned CPUs ...), taken from
the code by ``method_numbers``. ``check`` enforces both, so a hand-typed figure fails the test suite
(tests/bench/test_docs.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    abtest,
    counters,
    loadgen,
    memtrace,
    nodepage,
    nvmlprobe,
    peaks_cost,
    process_utilization,
    report,
    runner,
    servers,
    suite,
)

DOCS = runner.REPO_ROOT / "docs"
DOCUMENT = "benchmarks.md"
# A number as prose writes it: 110, 1,000, 2.5; not a digit inside a word, a commit or an issue (#14).
NUMBER = re.compile(r"(?<![\w#./:])\d+(?:[.,]\d+)*(?![\w])")
SECTION = re.compile(r"<!-- ([a-z-]+):start -->.*?<!-- \1:end -->", re.DOTALL)


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def _wrapped(name: str, body: str) -> str:
    start, end = markers(name)
    return f"{start}\n\n{body.strip()}\n\n{end}"


def _results(data: dict[str, Any]) -> str:
    return report.results_section(data)


def _process_utilization(data: dict[str, Any]) -> str:
    return process_utilization.section(data)


def _counters(data: dict[str, Any]) -> str:
    return _wrapped("counters", counters.report(data))


def failures_note(runs: Sequence[dict[str, Any]]) -> str:
    """How a results file's percentiles treat failed scrapes (older files predate counting them)."""
    phases = [phase for run in runs for phase in run.get("load", [])]
    failed = sum(int(phase.get("failed", 0)) for phase in phases)
    if phases and all("failed_counted_as_s" in phase for phase in phases):
        timeout = phases[0]["failed_counted_as_s"]
        return f"Failed scrapes: {failed:,}; the percentiles count each as {timeout:g} s (the scrape timeout)."
    if failed == 0:
        return ("Failed scrapes: none, so these percentiles are the same whether failures count as the "
                "scrape timeout or not (this file predates counting them).")
    return (f"Failed scrapes: {failed:,}, LEFT OUT of these percentiles (this file predates counting them "
            "as the scrape timeout): read the percentiles as flattering the servers that failed.")


def _servers(data: dict[str, Any]) -> str:
    rounds = len({run.get("round") for run in data["runs"]})
    commit = data.get("commit") or "not recorded by this version of the harness"
    run = (f"- Run: `python -m bench.servers --rounds {rounds}` at {data['started']} (commit {commit}); "
           f"body {data['body_bytes']:,} bytes (ours' exposition, OpenMetrics + gzip); closed-loop phases "
           f"{data['settings']['phase_s']:g} s, paced phase {data['settings']['paced_s']:g} s; medians over rounds.")
    return _wrapped("servers", run + "\n\n" + servers.summary(data) + "\n\n" + failures_note(data["runs"]))


def _server_ab(data: dict[str, Any]) -> str:
    run = (f"- Run: `python -m bench.abtest --before {data['before']} --rounds {data['rounds']}`, after = "
           f"commit {data['after']}, {data['duration_s'] / 60:.1f} min; medians over rounds, ratio: median of "
           "neighbouring runs' ratios.")
    runs = [run for results in data["sides"].values() for result in results for run in result["runs"]]
    return _wrapped("server-ab", run + "\n" + abtest.table(data["sides"]) + "\n\n" + failures_note(runs))


def _ab(name: str) -> Callable[[dict[str, Any]], str]:
    """A before/after section of ``bench.abtest`` with the command line that made it."""

    def render(data: dict[str, Any]) -> str:
        runs = [run for results in data["sides"].values() for result in results for run in result["runs"]]
        gpus = ",".join(str(count) for count in sorted({run["gpus"] for run in runs}))
        pods = ",".join(str(count) for count in sorted({run["pods"] for run in runs}))
        run = (f"- Run: `python -m bench.abtest --before {data['before']} --after-rev {data['after']} --gpus {gpus} "
               f"--pods {pods} --rounds {data['rounds']} --windows {data.get('windows', 'quick')}`, "
               f"{data['duration_s'] / 60:.1f} min; medians over rounds, ratio: median of neighbouring runs' ratios.")
        return _wrapped(name, run + "\n" + abtest.table(data["sides"]) + "\n\n" + failures_note(runs))

    return render


def _memtrace(data: dict[str, Any]) -> str:
    return _wrapped("memtrace", memtrace.report_text(data))


def _peaks_cost(name: str) -> Callable[[dict[str, Any]], str]:
    """A ``bench.peaks_cost`` section (the same harness run at two commits gives two sections)."""

    def render(data: dict[str, Any]) -> str:
        return _wrapped(name, peaks_cost.report_text(data))

    return render


def _dcgm_published(data: dict[str, Any]) -> str:
    lines = [data["note"], "", "| figure | value | source |", "|---|---|---|"]
    lines += [f"| {row['figure']} | {row['value']} | {row['source']} |" for row in data["rows"]]
    return _wrapped("dcgm-published", "\n".join(lines))


@dataclass(frozen=True)
class Section:
    name: str
    results: str  # file name under docs/
    render: Callable[[dict[str, Any]], str]


SECTIONS: tuple[Section, ...] = (
    Section("results", "benchmarks-full.json", _results),
    Section("servers", "benchmarks-servers.json", _servers),
    Section("server-ab", "benchmarks-server-ab.json", _server_ab),
    Section("process-utilization", "benchmarks-process-utilization.json", _process_utilization),
    Section("dcgm-published", "benchmarks-dcgm-published.json", _dcgm_published),
    Section("counters", "benchmarks-counters.json", _counters),
    Section("node-page", "benchmarks-node-page.json", nodepage.section),
    Section("peaks-ab", "benchmarks-peaks-ab.json", _ab("peaks-ab")),
    Section("peaks-ab-full", "benchmarks-peaks-ab-full.json", _ab("peaks-ab-full")),
    Section("peaks-ab-full-repeat", "benchmarks-peaks-ab-full-repeat.json", _ab("peaks-ab-full-repeat")),
    Section("budget-ab-full", "benchmarks-budget-ab-full.json", _ab("budget-ab-full")),
    Section("memtrace", "benchmarks-memtrace.json", _memtrace),
    Section("peaks-cost", "benchmarks-peaks-cost.json", _peaks_cost("peaks-cost")),
    Section("peaks-cost-now", "benchmarks-peaks-cost-now.json", _peaks_cost("peaks-cost-now")),
    Section("render-ab", "benchmarks-render-ab.json", _ab("render-ab")),
)


def _number(value: float) -> str:
    return f"{value:g}"


def method_numbers() -> dict[str, str]:
    """The numbers the prose may state, each with the constant it comes from (no measured figure)."""
    numbers: dict[str, str] = {}

    def add(value: float, source: str) -> None:
        numbers.setdefault(_number(value), source)

    for count in suite.GPU_COUNTS:
        add(count, "bench.suite.GPU_COUNTS")
    for count in suite.POD_COUNTS:
        add(count, "bench.suite.POD_COUNTS")
    for preset, settings in (("FULL", runner.FULL), ("QUICK", runner.QUICK)):
        for key in ("warmup_s", "idle_s", "phase_s", "paced_scrapers", "paced_interval_s", "repetitions"):
            add(getattr(settings, key), f"bench.runner.{preset}.{key}")
        for concurrency in settings.concurrencies:
            add(concurrency, f"bench.runner.{preset}.concurrencies")
        add(settings.interval_ms, f"bench.runner.{preset}.interval_ms")
        add(settings.interval_ms / 1000, f"bench.runner.{preset}.interval_ms, in seconds")
    add(runner.MIN_WINDOW_CYCLES, "bench.runner.MIN_WINDOW_CYCLES")
    add(int(runner.SERVER_CPU), "bench.runner.SERVER_CPU")
    add(int(runner.CLIENT_CPU), "bench.runner.CLIENT_CPU")
    add(runner.STARTUP_POLL_S * 1000, "bench.runner.STARTUP_POLL_S, in ms")
    add(loadgen.SCRAPE_TIMEOUT_S, "bench.loadgen.SCRAPE_TIMEOUT_S")
    add(int(loadgen.OK_STATUS), "bench.loadgen.OK_STATUS: any other HTTP status fails a scrape")
    for symbol, window in nvmlprobe.BLOCKING_WINDOW_S.items():
        add(window * 1000, f"bench.nvmlprobe.BLOCKING_WINDOW_S[{symbol}], in ms")
    add(counters.BUDGET_CALLS_RATIO, "bench.counters.BUDGET_CALLS_RATIO")
    return numbers


def prose(document: str) -> str:
    """The document without its generated sections (what a person wrote)."""
    return SECTION.sub("", document)


def hand_typed_numbers(document: str) -> list[str]:
    """Numbers in the prose that are not the harness's own settings."""
    allowed = method_numbers()
    found = []
    for match in NUMBER.finditer(prose(document)):
        text = match.group(0).replace(",", "")
        try:
            canonical = _number(float(text))
        except ValueError:
            canonical = text
        if canonical not in allowed:
            found.append(match.group(0))
    return found


def render(section: Section, docs: Path) -> str:
    return section.render(json.loads((docs / section.results).read_text(encoding="utf-8")))


def replace(document: str, name: str, generated: str) -> str:
    start, end = markers(name)
    if start not in document or end not in document:
        raise ValueError(f"{DOCUMENT} has no section {start} ... {end}")
    before, rest = document.split(start, 1)
    _, after = rest.split(end, 1)
    return before + generated + after


def regenerate(document: str, docs: Path) -> str:
    for section in SECTIONS:
        document = replace(document, section.name, render(section, docs))
    return document


def check(document: str, docs: Path) -> list[str]:
    """Every problem that makes ``document`` more than what its committed results files give."""
    problems = []
    for section in SECTIONS:
        start, end = markers(section.name)
        if start not in document or end not in document:
            problems.append(f"section {section.name}: markers missing")
            continue
        written = start + document.split(start, 1)[1].split(end, 1)[0] + end
        if written != render(section, docs):
            problems.append(f"section {section.name}: differs from what docs/{section.results} gives "
                            "(run `python -m bench docs`)")
    names = {match.group(1) for match in SECTION.finditer(document)}
    problems += [f"section {name}: no results file generates it" for name in sorted(names - {s.name for s in SECTIONS})]
    problems += [f"figure typed by hand in the prose: {number!r}" for number in hand_typed_numbers(document)]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report what differs")
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    path = args.docs / DOCUMENT
    document = path.read_text(encoding="utf-8")
    if args.check:
        problems = check(document, args.docs)
        for problem in problems:
            print(f"{path}: {problem}", file=sys.stderr)
        return 1 if problems else 0
    path.write_text(regenerate(document, args.docs), encoding="utf-8")
    print(f"wrote {path}")
    return 0

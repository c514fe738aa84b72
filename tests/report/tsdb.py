"""A real Prometheus on a backfilled TSDB: synthetic raw series, then the shipped recording rules.

Recording rules only run on new data, so history is made the way an operator would backfill
it: ``promtool tsdb create-blocks-from openmetrics`` for the raw exporter series, then
``promtool tsdb create-blocks-from rules`` for the recording rules, evaluated by the rule
backfiller against this Prometheus. The backfiller cannot see series it is writing in the same
run, so rules are backfilled level by level (a rule that reads another recorded series waits
for the level below it), restarting Prometheus in between so that it loads the new blocks.

Timing, so that every number is exact: the backfiller evaluates a rule group at a fixed offset
after each interval boundary (a hash of the group's name and file, learnt by ``rule_offset``).
The raw samples are placed at that offset (tests/report/synthetic.py), so every rule reads the
scrape taken at its own instant, and every level reads the level below at age zero. A report
point on the interval boundary then reads the evaluation just before it, one offset old:
Prometheus runs with ``--query.lookback-delta=60s`` (one interval of 120 s would also reach
the evaluation before that one). Backfilled blocks carry no staleness markers, which a live
Prometheus writes when a series ends; the short lookback ends a series where a marker would.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import yaml

from tests.support.programs import require_program
from tests.support.prometheus import PrometheusHarness

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDING_RULES = REPO_ROOT / "deploy" / "rules" / "gpu-pod-exporter-recording.yaml"
GROUP_NAME = "report-backfill"
RULES_NAME = "rules.yaml"  # relative: the evaluation offset must not depend on the temporary directory


def rule_levels(rule_file: Path, wanted: Iterable[str]) -> list[list[dict[str, object]]]:
    """The recording rules needed for ``wanted`` (and what they read), grouped by dependency depth."""
    rules = {str(rule["record"]): rule for group in yaml.safe_load(rule_file.read_text(encoding="utf-8"))["groups"]
             for rule in group["rules"] if "record" in rule}
    reads = {name: {other for other in rules if other != name
                    and re.search(rf"(?<![\w:]){re.escape(other)}(?![\w:])", str(rule["expr"]))}
             for name, rule in rules.items()}
    needed: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(reads[name])
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((level(other) for other in reads[name]), default=-1)
        return depth[name]

    levels: list[list[dict[str, object]]] = [[] for _ in range(max(level(n) for n in needed) + 1)]
    for name in sorted(needed):
        levels[level(name)].append({"record": name, "expr": rules[name]["expr"]})
    return levels


class BackfilledPrometheus:
    """Prometheus serving a TSDB built from OpenMetrics files and backfilled rules."""

    def __init__(self, workdir: Path, lookback: str = "60s", max_block_duration: str | None = None) -> None:
        self.workdir = workdir
        self.lookback = lookback
        # promtool's (hidden) --max-block-duration: months of data in a few blocks instead of one per 2 h
        self.block_flags = [f"--max-block-duration={max_block_duration}"] if max_block_duration else []
        self.data = workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.harness: PrometheusHarness | None = None
        self.promtool = require_program("promtool")

    @property
    def url(self) -> str:
        assert self.harness is not None, "not started"
        return self.harness.url

    # ------------------------------------------------------------------------------ blocks
    def add_openmetrics(self, name: str, lines: Iterable[str]) -> None:
        source = self.workdir / f"{name}.om"
        with source.open("w", encoding="utf-8") as handle:
            handle.writelines(lines)
        scratch = self.workdir / f"blocks-{name}"
        scratch.mkdir()
        self._run([self.promtool, "tsdb", "create-blocks-from", "openmetrics", *self.block_flags, str(source),
                   str(scratch)])
        self._move_blocks(scratch)
        source.unlink()

    def rule_offset(self, interval_s: int) -> float:
        """Seconds after the interval boundary at which the rule backfiller evaluates our group.

        Prometheus spreads rule groups over their interval by a hash of the group's name and file
        (``Group.EvalTimestamp``); the backfiller does the same. The group name and the relative
        file name are fixed here, so this is a constant of the Prometheus version; it is learnt
        from one probe rather than assumed, so that raw samples can be placed where the rules
        will read them.
        """
        probe_start = 1_700_000_000 - 1_700_000_000 % interval_s
        (self.workdir / RULES_NAME).write_text(yaml.safe_dump(
            {"groups": [{"name": GROUP_NAME, "rules": [{"record": "backfill:probe", "expr": "vector(1)"}]}]}),
            encoding="utf-8")
        scratch = self.workdir / "probe"
        scratch.mkdir()
        self.start()
        try:
            self._promtool_rules(scratch, probe_start, probe_start + 3 * interval_s, interval_s)
        finally:
            self.stop()
        [block] = [p for p in scratch.iterdir() if p.is_dir()]
        first_ms = int(json.loads((block / "meta.json").read_text(encoding="utf-8"))["minTime"])
        shutil.rmtree(scratch)
        return (first_ms / 1000.0 - probe_start) % interval_s

    def backfill_rules(self, wanted: Iterable[str], start: float, end: float, interval_s: int) -> None:
        """Backfill the shipped recording rules ``wanted`` needs, one dependency level at a time.

        Every level uses the same group name and file name, so all are evaluated at the same
        offset (``rule_offset``) and a level reads the one below at age zero.
        """
        for number, rules in enumerate(rule_levels(RECORDING_RULES, wanted)):
            (self.workdir / RULES_NAME).write_text(
                yaml.safe_dump({"groups": [{"name": GROUP_NAME, "rules": rules}]}), encoding="utf-8")
            scratch = self.workdir / f"rules-{number}"
            scratch.mkdir()
            self.start()
            try:
                self._promtool_rules(scratch, start, end, interval_s)
            finally:
                self.stop()
            self._move_blocks(scratch)

    def _promtool_rules(self, scratch: Path, start: float, end: float, interval_s: int) -> None:
        self._run([self.promtool, "tsdb", "create-blocks-from", "rules", f"--url={self.url}", f"--start={int(start)}",
                   f"--end={int(end)}", f"--eval-interval={interval_s}s", "--quiet", f"--output-dir={scratch}",
                   *self.block_flags, RULES_NAME])

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=self.workdir)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[1:4])} failed:\n{result.stdout}\n{result.stderr}")

    def _move_blocks(self, scratch: Path) -> None:
        for block in scratch.iterdir():
            if block.is_dir():
                shutil.move(str(block), self.data / block.name)
        shutil.rmtree(scratch)

    # --------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self.harness is None:
            self.harness = PrometheusHarness([], storage_path=self.data, retention="100y",
                                             extra_flags=[f"--query.lookback-delta={self.lookback}"]).start()

    def stop(self) -> None:
        if self.harness is not None:
            self.harness.stop()
            self.harness = None

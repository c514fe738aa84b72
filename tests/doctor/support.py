"""Running the doctor in-process the way a user runs it: ``main(argv)`` with stdout captured."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.doctor.cli import main

# Probes of a simulated node answer in milliseconds; a short deadline keeps the hang scenario fast.
FAST = ("--timeout", "2", "--address", "127.0.0.1:0")
# A scenario whose calls are slow but never hang (realistic-latency: a driver's real per-call latencies,
# 8 GPUs): on a machine under load the whole sample can pass 2 s, which is slowness, not a hang; its
# deadline is the doctor's own default, so only a real hang could fail it.
PATIENT = ("--address", "127.0.0.1:0")


@dataclass(frozen=True)
class Run:
    code: int
    output: str

    def json(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.output)
        return document

    def rows(self) -> list[dict[str, Any]]:
        return list(self.json()["rows"])

    def row(self, section: str, check: str) -> dict[str, Any]:
        found = [row for row in self.rows() if row["section"] == section and row["check"] == check]
        assert len(found) == 1, f"expected one row {section}/{check}, found {len(found)}:\n{self.output}"
        return found[0]

    def problems(self) -> list[tuple[str, str, str]]:
        return [(row["section"], row["check"], row["verdict"]) for row in self.rows()
                if row["verdict"] in ("degraded", "failed")]


class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def doctor(*argv: str, tty: bool = False) -> Run:
    out = TtyBuffer() if tty else io.StringIO()
    code = main([*argv], stdout=out)
    return Run(code, out.getvalue())


README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_TITLE = "What the rows say when they are not `ok`:"


def documented_rows() -> set[tuple[str, str]]:
    """``(section, check)`` pairs the README's troubleshooting table explains (``gpu N``, ``counter X``, ...)."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index(TABLE_TITLE):].split("\n\n")[1]
    rows: set[tuple[str, str]] = set()
    for line in table.splitlines()[2:]:
        first_cell = line.split("|")[1]
        section = ""
        for item in re.findall(r"`([^`]+)`", first_cell):
            if " / " in item:
                section, check = item.split(" / ", 1)
            else:
                check = item
            rows.add((section, check))
    return rows


def shape(section: str, check: str) -> tuple[str, str]:
    """A row's documented shape: GPU indices, counter names and access verbs become placeholders."""
    section = re.sub(r"^gpu \d+$", "gpu N", section)
    check = re.sub(r"^counter \S+$", "counter X", check)
    check = re.sub(r"^access \S+ \S+( \S+/\S+)?$", "access VERB RESOURCE", check)
    return section, check


def undocumented_problems(runs: list[Run]) -> set[tuple[str, str]]:
    documented = documented_rows()
    seen = {shape(section, check) for run in runs for section, check, _ in run.problems()}
    return seen - documented

"""Running the doctor in-process the way a user runs it: ``main(argv)`` with stdout captured."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

from exporter.doctor.cli import main

# Probes of a simulated node answer in milliseconds; a short deadline keeps the hang scenario fast.
FAST = ("--timeout", "2", "--address", "127.0.0.1:0")


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

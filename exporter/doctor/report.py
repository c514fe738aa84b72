"""The doctor's result: rows with a verdict, a detail and a fix hint, and the exit code they imply.

Verdicts: ``ok``; ``degraded`` (the exporter works, but something it could show is missing);
``failed`` (a part does not work); ``skipped`` (not checked: turned off in this configuration, or
unreachable because an earlier check failed). ``skipped`` never changes the exit code; every
``degraded`` or ``failed`` row carries a one-line hint saying how to fix it.

Exit codes: 0 when nothing is degraded or failed, 1 when something is, 2 when a configuration
input (flags, environment, config file, counters CSV, web config, scenario) is invalid, which the
exporter itself would refuse at start-up.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_CONFIG_ERROR = 2
JSON_FORMAT = "gpu-pod-exporter/doctor/v1"


class Verdict(enum.Enum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def is_problem(self) -> bool:
        return self in (Verdict.DEGRADED, Verdict.FAILED)


@dataclass(frozen=True)
class Row:
    """One check. ``section`` groups rows ("nvml", "gpu 3", "kubelet", ...); ``check`` names it.

    ``data`` holds the structured facts behind the detail text (for ``--json``); ``config_error``
    marks a row about an invalid input (exit code 2).
    """

    section: str
    check: str
    verdict: Verdict
    detail: str
    hint: str = ""
    config_error: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict.is_problem and not self.hint:
            raise ValueError(f"row {self.section}/{self.check} is {self.verdict.value} without a fix hint")

    def as_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"section": self.section, "check": self.check, "verdict": self.verdict.value,
                                  "detail": self.detail}
        if self.hint:
            result["hint"] = self.hint
        if self.config_error:
            result["config_error"] = True
        if self.data:
            result["data"] = dict(self.data)
        return result


def ok(section: str, check: str, detail: str, **data: Any) -> Row:
    return Row(section, check, Verdict.OK, detail, data=data)


def degraded(section: str, check: str, detail: str, hint: str, **data: Any) -> Row:
    return Row(section, check, Verdict.DEGRADED, detail, hint, data=data)


def failed(section: str, check: str, detail: str, hint: str, **data: Any) -> Row:
    return Row(section, check, Verdict.FAILED, detail, hint, data=data)


def skipped(section: str, check: str, detail: str, **data: Any) -> Row:
    return Row(section, check, Verdict.SKIPPED, detail, data=data)


def config_error(section: str, check: str, detail: str, hint: str) -> Row:
    return Row(section, check, Verdict.FAILED, detail, hint, config_error=True)


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    node: str = ""
    simulated: str = ""  # the scenario name under --simulate

    @classmethod
    def of(cls, rows: Iterable[Row], *, node: str = "", simulated: str = "") -> Report:
        return cls(tuple(rows), node=node, simulated=simulated)

    @property
    def verdict(self) -> Verdict:
        verdicts = {row.verdict for row in self.rows}
        for worst in (Verdict.FAILED, Verdict.DEGRADED):
            if worst in verdicts:
                return worst
        return Verdict.OK

    @property
    def exit_code(self) -> int:
        if any(row.config_error for row in self.rows):
            return EXIT_CONFIG_ERROR
        return EXIT_PROBLEM if self.verdict.is_problem else EXIT_OK

    def counts(self) -> dict[str, int]:
        counts = {verdict.value: 0 for verdict in Verdict}
        for row in self.rows:
            counts[row.verdict.value] += 1
        return counts

    def find(self, section: str, check: str) -> Row | None:
        return next((row for row in self.rows if row.section == section and row.check == check), None)

    def as_json(self) -> dict[str, Any]:
        return {"format": JSON_FORMAT, "verdict": self.verdict.value, "exit_code": self.exit_code,
                "node": self.node, "simulated": self.simulated or None, "counts": self.counts(),
                "rows": [row.as_json() for row in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.as_json(), indent=2, sort_keys=False, default=str)

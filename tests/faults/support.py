"""Helpers shared by the fault tests: start the real exporter, watch self-metrics, read its log."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.exporter_process import ExporterProcess
from tests.support.polling import wait_for

START_DEADLINE_S = 30.0


def exit_of(args: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the exporter until it exits on its own (a start-up error); its exit code and full output."""
    exporter = ExporterProcess(args, env)
    try:
        code = exporter.process.wait(START_DEADLINE_S)
    except subprocess.TimeoutExpired:
        exporter.stop()
        raise AssertionError(f"the exporter did not exit; log:\n{exporter.log()}") from None
    output = exporter.log()
    exporter.stop()
    return code, output


def value(exporter: ExporterProcess, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels`` (None if absent)."""
    for sample_labels, sample_value in exporter.samples(name):
        if all(sample_labels.get(key) == wanted for key, wanted in labels.items()):
            return sample_value
    return None


def single_value(exporter: ExporterProcess, name: str) -> float:
    """The value of ``name``, which must have exactly one sample (a self-metric without labels)."""
    [(_, sample_value)] = exporter.samples(name)
    return sample_value


def wait_value(exporter: ExporterProcess, name: str, wanted: float, deadline_s: float = 20.0, **labels: str) -> None:
    wait_for(lambda: value(exporter, name, **labels) == wanted or None, deadline_s, f"{name}{labels} == {wanted}")


def log_lines(exporter: ExporterProcess, needle: str) -> list[str]:
    return [line for line in exporter.log().splitlines() if needle in line]


def write_scenario(directory: Path, name: str, text: str) -> str:
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return str(path)

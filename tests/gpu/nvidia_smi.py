"""nvidia-smi as the oracle of the real-GPU tests (the test may shell out to it; the exporter never does).

Each field is asked on its own (``--query-gpu=index,<field>``): nvidia-smi refuses the whole query
when one field is unknown to the installed driver, and a per-field answer says exactly which
readings the driver has. Values come back in nvidia-smi's units (``nounits``); ``N/A`` and
``[Not Supported]`` mean the reading does not exist on that GPU.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from tests.support.programs import require_program

UNSUPPORTED = ("n/a", "[not supported]", "not supported", "[n/a]")


@dataclass(frozen=True)
class Answer:
    """One GPU's answer to one field: ``text`` as printed, ``supported`` False for N/A or Not Supported."""

    text: str

    @property
    def supported(self) -> bool:
        return self.text.strip().lower() not in UNSUPPORTED

    def number(self) -> float:
        text = self.text.strip().lower()
        if text in ("yes", "enabled", "true"):
            return 1.0
        if text in ("no", "disabled", "false"):
            return 0.0
        return float(text)


def _run(query: str, fields: str) -> list[list[str]] | None:
    binary = require_program("nvidia-smi")
    result = subprocess.run([binary, f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
                            capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        return None  # e.g. "Field ... is not a valid field to query" on this driver
    return [[part.strip() for part in line.split(",")] for line in result.stdout.splitlines() if line.strip()]


def query_gpu(field: str) -> dict[int, Answer] | None:
    """``{nvml index: answer}`` for one ``--query-gpu`` field; None when this driver's nvidia-smi lacks it."""
    lines = _run("gpu", f"index,{field}")
    if lines is None:
        return None
    return {int(parts[0]): Answer(",".join(parts[1:])) for parts in lines}


def query_remapped_rows(field: str) -> dict[str, Answer] | None:
    """``{PCI bus id (upper case): answer}`` for one ``--query-remapped-rows`` field."""
    lines = _run("remapped-rows", f"gpu_bus_id,{field}")
    if lines is None:
        return None
    return {parts[0].upper(): Answer(",".join(parts[1:])) for parts in lines}

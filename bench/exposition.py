"""What a scrape returned: size, series, and whether every GPU is in it (pure functions)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# One series per GPU that each exporter always serves once that GPU has been read.
GPU_PRESENCE = {
    "ours": re.compile(r'^DCGM_FI_DEV_GPU_TEMP\{[^}]*\bgpu="(\d+)"', re.MULTILINE),
    "nvitop": re.compile(r'^gpu_temperature_C\{[^}]*\bindex="(\d+)"', re.MULTILINE),
}
POD_LABEL = re.compile(r'[{,]pod="[^"]+"')


@dataclass(frozen=True)
class ExpositionSize:
    bytes: int
    series: int
    families: int


def measure(text: str) -> ExpositionSize:
    """Bytes, samples (non-comment lines) and families (# TYPE lines) of a text exposition."""
    series = families = 0
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# TYPE "):
                families += 1
        else:
            series += 1
    return ExpositionSize(len(text.encode("utf-8")), series, families)


def gpus_present(exporter: str, text: str) -> int:
    """How many distinct GPUs have a reading in ``text``."""
    return len(set(GPU_PRESENCE[exporter].findall(text)))


def attributed_series(text: str) -> int:
    """Samples carrying a pod label (attribution has arrived)."""
    return sum(1 for line in text.splitlines() if not line.startswith("#") and POD_LABEL.search(line))

"""A scenario's mistakes (``ScenarioError``: ``file:line: key: message``) and the NVML error codes it may name."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import pynvml

from exporter import safeyaml
from exporter.config import ConfigError


def _nvml_error_codes() -> dict[str, int]:
    """Error names accepted in scenarios: ``NotSupported`` and ``NVML_ERROR_NOT_SUPPORTED`` styles."""
    codes: dict[str, int] = {}
    for constant in dir(pynvml):
        if constant.startswith("NVML_ERROR_"):
            code = int(getattr(pynvml, constant))
            short = "".join(part.capitalize() for part in constant[len("NVML_ERROR_"):].split("_"))
            codes[constant] = code
            codes[short] = code
    return codes


NVML_ERROR_CODES: Mapping[str, int] = MappingProxyType(_nvml_error_codes())


class ScenarioError(ConfigError):
    """A mistake in a scenario file; ``str()`` is ``file:line: key.path: message``."""

    def __init__(self, file: str, line: int | None, key: str, message: str) -> None:
        self.file = file
        self.line = line
        super().__init__(f"{file}:{line}" if line is not None else file, key, message)


def parse_error_code(raw: object) -> int:
    """An NVML error code from a name (``NotSupported``, ``NVML_ERROR_GPU_IS_LOST``) or number."""
    if isinstance(raw, bool):
        raise ValueError(f"invalid NVML error {raw!r}")
    if isinstance(raw, int):
        if raw not in set(NVML_ERROR_CODES.values()):
            raise ValueError(f"unknown NVML error code {raw}")
        return raw
    text = str(raw).strip()
    if text in NVML_ERROR_CODES:
        return NVML_ERROR_CODES[text]
    known = ", ".join(sorted(name for name in NVML_ERROR_CODES if not name.startswith("NVML_")))
    raise ValueError(f"unknown NVML error {text!r} (known: {known})")


def scenario_file(source: str) -> safeyaml.YamlFile:
    """How a scenario's nodes are read: its own error, values shown (a scenario holds no secrets)."""
    return safeyaml.YamlFile(source, ScenarioError, shows_values=True, document_key="scenario")

"""Command-line entry point (filled in by the core exporter work)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from exporter.config import EXIT_CONFIG_ERROR, PROGRAM, ConfigError, load_config


def main(argv: Sequence[str] | None = None) -> int:
    try:
        load_config(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"{PROGRAM}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return 0

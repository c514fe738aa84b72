#!/usr/bin/env python3
"""Regenerate the README's flag and metric tables from the code (``--check``: fail if out of date)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.reference_docs import regenerate  # noqa: E402


def main() -> int:
    readme = ROOT / "README.md"
    current = readme.read_text(encoding="utf-8")
    fresh = regenerate(current)
    if "--check" in sys.argv[1:]:
        if fresh != current:
            print("README.md is out of date: run scripts/gen-docs.py", file=sys.stderr)
            return 1
        return 0
    if fresh != current:
        readme.write_text(fresh, encoding="utf-8")
        print("README.md updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

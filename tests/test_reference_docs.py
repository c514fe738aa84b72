"""The README's generated tables must match the code (flags, DCGM metrics, exporter-owned metrics)."""

from __future__ import annotations

from pathlib import Path

from exporter.config import OPTIONS
from exporter.metrics.catalog import CATALOG
from exporter.metrics.owned import OWNED
from exporter.reference_docs import regenerate

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_tables_are_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert regenerate(text) == text, "README.md is out of date: run scripts/gen-docs.py"


def test_readme_names_every_flag_env_var_and_served_metric() -> None:
    text = README.read_text(encoding="utf-8")
    for option in OPTIONS:
        assert f"`{option.long_flag}`" in text and f"`{option.env}`" in text
    for spec in CATALOG.fields:
        if spec.served:
            assert f"`{spec.name}`" in text
    for metric in OWNED:
        assert f"`{metric.name}`" in text


def test_readme_opens_with_the_run_and_test_commands() -> None:
    first_lines = README.read_text(encoding="utf-8").splitlines()[:6]
    assert any(line.startswith("./scripts/run --simulate") for line in first_lines)
    assert any(line.startswith("./scripts/test") for line in first_lines)
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec ./scripts/test" in ci

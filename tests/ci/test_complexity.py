"""No function in the product at complexity grade D or worse (radon's cyclomatic complexity: D from 21 on).

A function that branches twenty ways mixes concerns: SamplingPlan.for_specs switched on every kind of
catalog reading (35) until each reading answered for itself, and the fake API server's watch stream (28)
decided expiry, events, timeouts and bookmarks in one loop until each was a method of its own. The check
covers both packages the wheel ships, the simulator included: its scenario parser and fakes are read and
extended as often as the exporter. It reads the same numbers as ``radon cc -s -n D exporter simulator``
and names every offender with its file, line and score.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("exporter", "simulator")  # every package the wheel ships
ALLOWED_GRADES = frozenset("ABC")


def too_complex(root: Path, shown_from: Path) -> list[str]:
    """``file:line: name grade (score)`` of every function, method or class under ``root`` above grade C."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            grade = cc_rank(block.complexity)
            if grade not in ALLOWED_GRADES:
                found.append(f"{path.relative_to(shown_from)}:{block.lineno}: {block.fullname} {grade} "
                             f"({block.complexity})")
    return found


def test_no_function_in_the_product_is_above_grade_c() -> None:
    offenders = [line for package in PRODUCT for line in too_complex(REPO / package, REPO)]
    assert offenders == [], "split these by concern:\n" + "\n".join(offenders)


def _branching(name: str, branches: int) -> str:
    """A function of ``branches`` ``if``s: radon scores it ``branches + 1``."""
    body = "\n".join(f"    if x == {n}:\n        return {n}" for n in range(branches))
    return f"def {name}(x):\n{body}\n    return -1\n"


def test_the_check_names_a_function_above_grade_c(tmp_path: Path) -> None:
    (tmp_path / "tangled.py").write_text(_branching("tangled", 20), encoding="utf-8")  # 21: the first D
    (tmp_path / "busy.py").write_text(_branching("busy", 19), encoding="utf-8")  # 20: the last C
    (tmp_path / "plain.py").write_text("def plain(x):\n    return x if x else -1\n", encoding="utf-8")
    assert too_complex(tmp_path, tmp_path) == ["tangled.py:1: tangled D (21)"]


def test_the_check_covers_every_package_the_wheel_ships() -> None:
    """A package the wheel ships but ``PRODUCT`` leaves out would go unchecked (the simulator did)."""
    with (REPO / "pyproject.toml").open("rb") as file:
        shipped = tomllib.load(file)["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(PRODUCT) == sorted(pattern.rstrip("*") for pattern in shipped)

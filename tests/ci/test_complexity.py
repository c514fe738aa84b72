"""No function in the product above complexity grade D (radon's cyclomatic complexity: E from 31 on).

A function that branches thirty ways mixes concerns: SamplingPlan.for_specs switched on every kind of
catalog reading (35) until each reading answered for itself. The check reads the same numbers as
``radon cc -s -n E exporter simulator`` and names every offender with its file, line and score.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("exporter", "simulator")  # every package the wheel ships
ALLOWED_GRADES = frozenset("ABCD")


def too_complex(root: Path, shown_from: Path) -> list[str]:
    """``file:line: name grade (score)`` of every function, method or class under ``root`` above grade D."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            grade = cc_rank(block.complexity)
            if grade not in ALLOWED_GRADES:
                found.append(f"{path.relative_to(shown_from)}:{block.lineno}: {block.fullname} {grade} "
                             f"({block.complexity})")
    return found


def test_no_function_in_the_product_is_above_grade_d() -> None:
    offenders = [line for package in PRODUCT for line in too_complex(REPO / package, REPO)]
    assert offenders == [], "split these by concern:\n" + "\n".join(offenders)


def test_the_check_names_a_function_above_grade_d(tmp_path: Path) -> None:
    branches = "\n".join(f"    if x == {n}:\n        return {n}" for n in range(31))
    (tmp_path / "tangled.py").write_text(f"def tangled(x):\n{branches}\n    return -1\n", encoding="utf-8")
    (tmp_path / "plain.py").write_text("def plain(x):\n    return x if x else -1\n", encoding="utf-8")
    assert too_complex(tmp_path, tmp_path) == ["tangled.py:1: tangled E (32)"]

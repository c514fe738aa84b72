"""bench/nodepage.py's report: medians per variant over repetitions, failures counted, every variant listed."""

from __future__ import annotations

from bench.nodepage import END, START, VARIANTS, section


def run(variant: str, repetition: int, p50: float, failures: int = 0) -> dict[str, object]:
    return {"variant": variant, "repetition": repetition, "scrapes": 100, "scrape_failures": failures,
            "scrape_p50_ms": p50, "scrape_p99_ms": p50 * 10, "scrapes_per_s": 1000 / p50,
            "page_answers": 0, "page_failures": 0, "page_answers_per_s": 2.0 if variant != "baseline" else 0.0,
            "exporter_cpu_percent": 50.0}


def test_the_section_has_one_row_per_variant_with_medians_over_repetitions() -> None:
    data = {"command": "python -m bench node-page", "started": "2026-12-03T19:00:00Z", "commit": "abc1234",
            "scenario": "shared-gpus",
            "settings": {"window_s": 20.0, "repetitions": 3, "tabs": 4, "page_refresh_s": 2.0, "hammer_concurrency": 4},
            "runs": [run(variant, rep, p50) for rep, p50 in enumerate((1.0, 2.0, 9.0)) for variant in VARIANTS]
            + [run("page hammered", 3, 4.0, failures=2)]}
    text = section(data)
    assert text.startswith(START + "\n\n- Run: `python -m bench node-page` at 2026-12-03T19:00:00Z (commit abc1234)")
    assert text.endswith("\n\n" + END)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "variant" not in line]
    assert [row.split(" | ")[0] for row in rows] == ["| baseline", "| page open", "| page hammered"]
    assert rows[0] == "| baseline | 2.00 | 20.00 | 500 | 0.0 | 50 | 0 |"
    assert rows[2].startswith("| page hammered | 3.00 | 30.00 |") and rows[2].endswith("| 2 |")

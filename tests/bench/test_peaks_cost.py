"""bench.peaks_cost: the section it writes."""

from bench import peaks_cost


def test_the_peaks_cost_section_states_render_cost_series_and_window_memory_per_gpu_count():
    run = {"gpus": 8, "rounds": 20, "render_cpu_ms": {"without": 2.0, "with": 2.3},
           "series": {"without": 298, "with": 330}, "text_bytes": {"without": 1000, "with": 1100},
           "add_cpu_us_per_cycle": 15.2, "windows_bytes_per_gpu_worst_case": 20386.0}
    text = peaks_cost.report_text({"started": "2026-12-03T19:42:25Z", "commit": "abc1234", "runs": [run]})
    assert "`python -m bench.peaks_cost --gpus 8 --rounds 20`" in text
    assert "| 8 | 2.00 | 2.30 | 1.15 | 298 | 330 | 4 | 1.10 | 15 | 20,386 |" in text


def test_the_profile_names_the_encoder_and_the_renderer_by_own_time():
    text = peaks_cost.profile(2, rounds=2, top=40)
    assert "tottime" in text and "exposition.py" in text and "render.py" in text

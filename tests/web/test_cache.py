"""The exposition cache keeps serving the last good exposition when a render or its encoding fails."""

from __future__ import annotations

from prometheus_client.core import Metric

from exporter.web.cache import ExpositionCache


def temperature(value: object) -> Metric:
    family = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
    family.add_sample("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0"}, value)  # type: ignore[arg-type]
    return family


def test_an_encoding_failure_keeps_the_last_exposition_and_the_next_render_recovers() -> None:
    # The middle render builds a family the encoder cannot write (a bug in some builder's values).
    outputs = [[temperature(40)], [temperature("not a number")], [temperature(41)]]
    cache = ExpositionCache(lambda: outputs.pop(0))
    first = cache.refresh()
    assert b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n' in first.body(False, False)
    assert cache.refresh() is first  # the failed encoding publishes nothing ...
    assert cache.render_failures == 1
    third = cache.refresh()  # ... and does not stop the next render
    assert b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n' in third.body(False, False)
    assert third.generation == first.generation + 1

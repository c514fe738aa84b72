"""The exposition cache: the last good exposition stays served when a render fails; variants in demand are ready."""

from __future__ import annotations

import gzip

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


def test_a_variant_scrapes_asked_for_is_encoded_by_the_renderer_for_the_next_generation_only() -> None:
    """Prometheus asks for gzip: after one such scrape, each new render has the gzip variant ready, so no
    scrape encodes on the event loop; once nobody asks any more, one render later it is no longer made."""
    cache = ExpositionCache(lambda: [temperature(40)])
    first = cache.refresh()
    assert not first.encoded(False, True)  # nobody asked yet: nothing beyond the text is encoded
    first.body(False, True)
    second = cache.refresh()
    assert second.encoded(False, True) and not second.encoded(True, False)
    assert gzip.decompress(second.body(False, True)) == second.body(False, False)
    third = cache.refresh()  # the second generation was asked for gzip too (just above)
    assert third.encoded(False, True)
    fourth = cache.refresh()  # the third was asked for nothing
    assert not fourth.encoded(False, True)

"""The HTML report: self-contained, both plots inline, every name from Prometheus escaped."""

from __future__ import annotations

import base64
import re

from exporter.prometheus.client import Series
from exporter.report.collect import Fetched
from exporter.report.compute import build_report
from exporter.report.html import render_html, render_plots
from exporter.report.model import Settings, Window
from exporter.report.pricing import PriceSheet
from exporter.report.sources import ALLOCATION_INPUTS, SOURCES, UTILIZATION_INPUTS, Presence
from tests.report.plotting import require_matplotlib

WINDOW = Window(start=1748822400.0, end=1748822400.0 + 3 * 86400, step=3600.0)


def hostile_report() -> tuple[Fetched, Settings]:
    names = [s.series for s in SOURCES] + list(ALLOCATION_INPUTS) + list(UTILIZATION_INPUTS)
    presence = Presence({name: frozenset({""}) for name in names})
    labels = {"namespace": "<script>alert(1)</script>", "team": 'a"b&c', "modelName": "M", "pod": "p<1>"}
    series = [Series(labels, tuple((t, 1.0) for t in WINDOW.times()))]
    idle = [Series(labels, tuple((t, 1.0) for t in WINDOW.times()[:24]))]
    fetched = Fetched(WINDOW, presence, {"fraction": series, "busy": [], "measured": series, "idle": idle},
                      {"fraction": series, "idle": idle}, [], ("store <b>1</b> down",))
    settings = Settings(prometheus="http://p", by="team", idle_threshold_percent=5.0, reclaim_by="p95",
                        currency="EUR", default_price=1.0)
    return fetched, settings


def test_html_is_self_contained_with_both_plots_and_escapes_names() -> None:
    require_matplotlib()
    fetched, settings = hostile_report()
    report = build_report(fetched, settings, PriceSheet(default=1.0))
    html = render_html(report)
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 2 and all(base64.b64decode(image).startswith(b"\x89PNG") for image in images)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a&quot;b&amp;c" in html and "p&lt;1&gt;" in html
    assert "store &lt;b&gt;1&lt;/b&gt; down" in html  # a Prometheus warning, shown and escaped
    assert "http://" not in html.replace("http://p", "")  # no external assets
    assert "<h2>GPU usage and cost by team</h2>" in html and "<h2>Notes</h2>" not in html


def test_plots_are_the_same_bytes_for_the_same_report() -> None:
    require_matplotlib()
    fetched, settings = hostile_report()
    report = build_report(fetched, settings, PriceSheet(default=1.0))
    assert render_plots(report) == render_plots(report)
    assert set(render_plots(report)) == {"daily-gpu-hours", "allocated-vs-busy"}

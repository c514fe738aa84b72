"""The urwid view without a terminal: the focus follows its GPU when a refresh reorders the rows."""

from __future__ import annotations

from typing import Any

from exporter.top.model import Filters, NodeView
from exporter.top.sources import Reading
from exporter.top.ui import TopApp


def node(utils: dict[int, float]) -> NodeView:
    gpus: list[dict[str, Any]] = [{"gpu": index, "utilization_percent": util, "containers": [], "mig": []}
                                  for index, util in utils.items()]
    return NodeView("", "node-a", {"gpus": gpus})


def test_the_focus_stays_on_its_gpu_when_a_refresh_reorders_the_rows() -> None:
    app = TopApp(lambda _filters: Reading(), Filters(), interval_s=1.0, sort="use", idle_below=5.0)
    app.nodes = [node({0: 90.0, 1: 50.0, 2: 10.0})]
    app.redraw()
    assert app.focused_key() == ("", "node-a", 0)
    app._list.focus_position = 1  # the user pressed Down: GPU 1
    app.nodes = [node({0: 5.0, 1: 50.0, 2: 95.0})]  # GPU 1 is still second; GPU 0 falls to the end
    app.redraw()
    assert app.focused_key() == ("", "node-a", 1)
    app._list.focus_position = 2  # GPU 0
    app.nodes = [node({0: 99.0, 1: 50.0, 2: 95.0})]
    app.redraw()
    assert app.focused_key() == ("", "node-a", 0) and app._list.focus_position == 0
    app.nodes = [node({1: 50.0})]  # its GPU went away: the focus stays within the list
    app.redraw()
    assert app.focused_key() == ("", "node-a", 1)

"""The urwid view without a terminal, read as the user reads it (the frame rendered to text): the focus
follows its GPU, a source that goes down keeps its rows marked stale with the time last seen, every
condition is shown with its reason at 80 and 160 columns, a hostile label cannot reach the terminal,
``?`` shows the keys, and the filter editor opens with the current filter, which typing replaces."""

from __future__ import annotations

import time
from typing import Any

from exporter.top.lastseen import LastSeen
from exporter.top.model import Filters, NodeView
from exporter.top.sources import Reading, SourceError
from exporter.top.ui import TopApp

NOW = 1_700_000_000.0
HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J"


def node(utils: dict[int, float], name: str = "node-a", **view: Any) -> NodeView:
    gpus: list[dict[str, Any]] = [{"gpu": index, "utilization_percent": util, "containers": [], "mig": []}
                                  for index, util in utils.items()]
    return NodeView("", name, {"gpus": gpus, **view})


def busy_node(name: str, *, sampled_at: float = NOW - 1, stale_after_s: float | None = 1.5) -> NodeView:
    """Two GPUs as the exporter's /gpus.json has them: GPU 0 held by a pod and idle, GPU 1 with two conditions."""
    gpus = [
        {"gpu": 0, "model": "NVIDIA H100 80GB HBM3", "utilization_percent": 0.0, "memory_used_mib": 0.0,
         "memory_total_mib": 81559.0, "healthy": True, "up": True, "mig": [],
         "containers": [{"namespace": "research", "pod": "forgotten-0", "container": "idle", "team": "ml",
                         "gpu_instance_id": None, "sm_util_percent": None, "memory_used_mib": None}],
         "conditions": [{"id": "idle", "alert": "GpuAllocatedButIdle", "severity": "warning",
                         "text": "allocated, utilisation 0 % (idle below 5 %)"}]},
        {"gpu": 1, "model": "NVIDIA H100 80GB HBM3", "utilization_percent": 97.0, "memory_used_mib": 78000.0,
         "memory_total_mib": 81559.0, "healthy": False, "health_reason": "fatal_xid", "up": True, "mig": [],
         "containers": [{"namespace": "training", "pod": "trainer-0", "container": "trainer", "team": "ml",
                         "gpu_instance_id": None, "sm_util_percent": None, "memory_used_mib": None}],
         "conditions": [
             {"id": "fatal_xid", "alert": "GpuXidFatal", "severity": "critical",
              "text": "fatal Xid 48 (double-bit ECC error) x1 in the last 5 min"},
             {"id": "memory_nearly_full", "alert": "GpuMemoryNearlyFull", "severity": "warning",
              "text": "memory 76.2 of 79.6 GiB (96%, nearly full above 95%)"}]},
    ]
    return NodeView("", name, {"gpus": gpus, "sampled_at": sampled_at, "served_at": NOW,
                               "sampling_interval_s": 0.5, "stale_after_s": stale_after_s, "conditions": []})


def rendered(app: TopApp, width: int, height: int = 40) -> list[str]:
    """The screen as the terminal would show it at ``width`` x ``height``."""
    app.width = width
    app.redraw()
    canvas = app.frame.render((width, height), focus=True)
    return [line.decode("utf-8").rstrip() for line in canvas.text]


class Script:
    """A read function that answers from a list of readings, one per call, at a settable clock."""

    def __init__(self, *readings: Reading) -> None:
        self.readings = list(readings)

    def __call__(self, _filters: Filters) -> Reading:
        return self.readings.pop(0)


def app_reading(reading: Reading | Script, width: int = 160) -> TopApp:
    read = reading if isinstance(reading, Script) else Script(reading)
    app = TopApp(read, Filters(), interval_s=1.0, sort="name", idle_below=5.0)
    app.last_seen = LastSeen(read, clock=lambda: NOW)
    app.read = app.last_seen
    app.width = width
    return app


def refresh(app: TopApp) -> None:
    """One read, as the worker thread does it, handed to the UI as the main loop would."""
    app._pending = app.read(app.filters)
    app._arrived(b"1")


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


def test_every_condition_is_shown_with_its_reason_and_state_kept_at_80_and_160_columns() -> None:
    app = app_reading(Reading(nodes=[busy_node("node-a")]))
    refresh(app)
    for width in (160, 80):
        screen = rendered(app, width)
        assert all(len(line) <= width for line in screen)
        text = "\n".join(screen)
        header = next(line for line in screen if "STATE" in line)
        for column in ("NODE", "GPU", "UTIL%", "AGE", "STATE", "PODS"):
            assert column in header, (width, header)
        gpu1 = next(line for line in screen if line.startswith("node-a") and " 1 " in line)
        assert "UNHEALTHY fatal_xid" in gpu1 and "training/trainer-0" in gpu1
        gpu0 = next(line for line in screen if line.startswith("node-a") and " 0 " in line)
        assert "ALLOCATED IDLE" in gpu0 and "research/forgotten-0" in gpu0
        # Every reason in full (wrapped at 80 columns, never cut), with its severity and alert.
        flat = " ".join(text.split())
        for reason in ("CRITICAL: fatal Xid 48 (double-bit ECC error) x1 in the last 5 min [GpuXidFatal]",
                       "WARNING: memory 76.2 of 79.6 GiB (96%, nearly full above 95%) [GpuMemoryNearlyFull]",
                       "WARNING: allocated, utilisation 0 % (idle below 5 %) [GpuAllocatedButIdle]"):
            assert reason in flat, (width, text)
    # At 80 columns the low-priority columns went, in their declared order.
    header = next(line for line in rendered(app, 80) if "STATE" in line)
    assert "MODEL" not in header and "POWER" not in header and "TEMP" not in header
    assert "MODEL" in next(line for line in rendered(app, 160) if "STATE" in line)


def test_the_title_and_key_hints_drop_parts_by_priority_and_never_clip_at_80_and_160_columns() -> None:
    app = app_reading(Reading(nodes=[busy_node("node-a")]))
    refresh(app)
    wide = rendered(app, 160)
    assert wide[0] == (" gpu-pod-exporter top | GPUs by name | filter: none | clusters: - | "
                       "1 refreshes, each 0 /metrics reads")
    assert wide[-1] == ("? help  q quit  tab gpus/pods  s sort  / filter  c clear filter  r refresh  "
                        "arrows/pgup/pgdn/home/end move")
    narrow = rendered(app, 80)
    assert all(len(line) <= 80 for line in narrow)
    assert narrow[0] == " gpu-pod-exporter top | GPUs by name | filter: none | clusters: -"  # the refresh count went
    assert narrow[-1] == "? help  q quit  tab gpus/pods  s sort  / filter  c clear filter  r refresh"  # the arrows went
    assert rendered(app, 40)[-1] == "? help  q quit  tab gpus/pods  / filter"  # "? help" always: ? lists every key
    # What never drops (view, sort, filter: why rows are missing) wraps onto a second line, whole.
    app.filters = Filters.parse("namespace=research-platform team=machine-learning-infrastructure node=gpu-node-17")
    screen = rendered(app, 80)
    assert all(len(line) <= 80 for line in screen)
    assert screen[0] == " gpu-pod-exporter top | GPUs by name | filter: namespace=research-platform"
    assert screen[1] == "team=machine-learning-infrastructure node=gpu-node-17"


def test_a_filter_error_replaces_the_key_hints_and_wraps_until_the_next_edit() -> None:
    app = app_reading(Script(*[Reading(nodes=[busy_node("node-a")])] * 3))
    refresh(app)
    app._input("/")
    assert app._edit is not None
    for char in "colour=blue":
        app._edit.keypress((80,), char)
    app._input("enter")
    error = " ".join(" ".join(rendered(app, 80)[-3:]).split())
    assert "colour" in error and "? help" not in error
    app._input("/")
    app._input("esc")
    assert rendered(app, 80)[-1].startswith("? help  q quit")


def test_a_source_that_goes_down_keeps_its_rows_marked_stale_with_the_time_last_seen() -> None:
    a, b = busy_node("node-a"), busy_node("node-b")
    down = SourceError("http://node-b:9400/metrics", "cannot reach the exporter: connection refused")
    script = Script(Reading(nodes=[a, b]), Reading(nodes=[a], errors=[down]), Reading(nodes=[a]))
    app = app_reading(script)
    refresh(app)
    assert "4 GPUs" in "\n".join(rendered(app, 160))
    refresh(app)  # node-b's source is down
    screen = rendered(app, 160)
    text = "\n".join(screen)
    assert "4 GPUs" in text and "2 STALE" in text  # not "2 GPUs": node-b's GPUs are still there
    seen = time.strftime("%H:%M:%S", time.localtime(NOW))
    assert f"STALE node-b: last seen {seen}" in text
    assert "SOURCE DOWN http://node-b:9400/metrics: cannot reach the exporter" in text
    rows_b = [line for line in screen if line.startswith("node-b")]
    assert len(rows_b) == 2 and all("STALE" in line for line in rows_b)
    assert not any("STALE" in line for line in screen if line.startswith("node-a"))
    refresh(app)  # every source answers and node-b is not among them: it is gone, not down
    assert "2 GPUs" in "\n".join(rendered(app, 160))


def test_data_older_than_its_bound_is_stale_and_its_age_is_shown() -> None:
    app = app_reading(Reading(nodes=[busy_node("node-a", sampled_at=NOW - 1),
                                     busy_node("node-b", sampled_at=NOW - 40)]))
    refresh(app)
    screen = rendered(app, 160)
    assert all(line.rstrip().split()[9] == "1s" for line in screen if line.startswith("node-a"))
    assert all("STALE 40s" in line for line in screen if line.startswith("node-b"))
    assert "data 1s-40s old" in "\n".join(screen)


def test_a_hostile_label_cannot_reach_the_terminal() -> None:
    evil = busy_node(HOSTILE)
    evil.view["gpus"][0]["containers"][0]["pod"] = HOSTILE
    evil.view["gpus"][0]["conditions"][0]["text"] = HOSTILE
    app = app_reading(Reading(nodes=[evil], errors=[SourceError(HOSTILE, HOSTILE)]))
    refresh(app)
    for view in ("gpus", "pods"):
        app.view = view
        text = "\n".join(rendered(app, 200))
        assert "\x1b" not in text and "\x07" not in text
        assert "evil\\x1b]0;pwned\\x07" in text


def test_question_mark_shows_the_keys_and_any_key_goes_back() -> None:
    app = app_reading(Reading(nodes=[busy_node("node-a")]))
    refresh(app)
    assert "? help" in rendered(app, 160)[-1]
    app._input("?")
    text = "\n".join(rendered(app, 160))
    for key in ("tab, g, p", "/ or f", "ctrl-u clears", "refresh now", "quit", "STALE"):
        assert key in text
    app._input("x")
    assert any(line.startswith("node-a") for line in rendered(app, 160))


def test_the_filter_editor_opens_with_the_current_filter_and_typing_replaces_it() -> None:
    app = app_reading(Script(*[Reading(nodes=[busy_node("node-a")])] * 5))
    refresh(app)
    app.filters = Filters.parse("namespace=research")
    app._input("/")
    assert app._edit is not None and app._edit.edit_text == "namespace=research"
    size = (160,)
    for char in "team=ml":
        app._edit.keypress(size, char)
    assert app._edit.edit_text == "team=ml"  # replaced, not "namespace=researchteam=ml"
    app._input("enter")
    assert app.filters.values == {"team": "ml"}
    # Reopened: the arrows edit the text instead of replacing it.
    app._input("/")
    assert app._edit is not None
    app._edit.keypress(size, "end")
    for char in " node=node-a":
        app._edit.keypress(size, char)
    assert app._edit.edit_text == "team=ml node=node-a"
    app._edit.keypress(size, "ctrl u")
    assert app._edit.edit_text == ""
    app._input("esc")
    assert app.filters.values == {"team": "ml"}

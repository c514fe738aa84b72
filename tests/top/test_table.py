"""``top --once`` text and the column layout, as printed: a hostile label is escaped, never sent to the
terminal; every column at no width limit; columns drop by their declared priority; PODS shows whole pod names
and a count of the rest."""

from __future__ import annotations

import io

from exporter.top.cli import main
from exporter.top.model import Filters, screen
from exporter.top.sources import Reading, SourceError
from exporter.top.table import GPU_COLUMNS, Part, fit_parts, gpu_lines, layout, once_text, pods_cell, printable
from tests.support.prometheus import serve_metrics
from tests.top.test_ui import HOSTILE, NOW, busy_node

# An exporter's /metrics whose pod name and team label carry terminal escapes (OSC retitle, clear screen).
HOSTILE_METRICS = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"} 0\n'
                   'DCGM_EXP_GPU_ALLOCATION_INFO{gpu="0",UUID="GPU-1",Hostname="node-a",namespace="ml",'
                   f'pod="{HOSTILE}",container="c",team="{HOSTILE}"}} 1\n')


def test_printable_escapes_terminal_controls_and_keeps_text() -> None:
    assert printable("chat-api-0 · ünïcode 中文") == "chat-api-0 · ünïcode 中文"
    assert printable(HOSTILE) == "evil\\x1b]0;pwned\\x07\\x1b[2J"
    assert printable("a\u202eb\x9bc\x7f") == "a\\u202eb\\x9bc\\x7f"  # bidi override, C1 CSI, DEL


def test_once_escapes_a_hostile_label_and_shows_the_age_of_every_node() -> None:
    evil = busy_node(HOSTILE, sampled_at=NOW - 40)
    evil.view["gpus"][1]["containers"][0]["namespace"] = HOSTILE
    evil.view["conditions"] = [{"id": "samples_stale", "alert": "GpuPodExporterSamplesStale",
                                "severity": "warning", "text": HOSTILE}]
    reading = Reading(nodes=[evil, busy_node("node-b")], errors=[SourceError("http://x/metrics", HOSTILE)])
    for view in ("gpus", "pods"):
        text = once_text(reading, screen(reading.nodes, Filters(), "name"), view, now=NOW)
        assert "\x1b" not in text and "\x07" not in text, text
        assert "evil\\x1b]0;pwned\\x07" in text
    text = once_text(reading, screen(reading.nodes, Filters(), "name"), "gpus", now=NOW)
    assert "MODEL" in text and "POWER" in text  # no terminal: every column
    assert "STALE 40s" in text and " 1s " in text and "data 1s-40s old" in text
    assert "NODE evil\\x1b]0;pwned\\x07\\x1b[2J WARNING: evil\\x1b]0;pwned" in text
    assert "CRITICAL: fatal Xid 48 (double-bit ECC error) x1 in the last 5 min [GpuXidFatal]" in text


def test_columns_drop_by_priority_and_state_never_does() -> None:
    titles = [column.title for column in layout(GPU_COLUMNS, 80, show_cluster=False)]
    assert titles == ["NODE", "GPU", "UTIL%", "AGE", "STATE", "PODS"]
    titles = [column.title for column in layout(GPU_COLUMNS, 80, show_cluster=True)]
    assert titles == ["CLUSTER", "NODE", "GPU", "UTIL%", "AGE", "STATE"]
    titles = [column.title for column in layout(GPU_COLUMNS, 40, show_cluster=True)]
    assert titles == ["GPU", "UTIL%", "AGE", "STATE"]
    assert "STATE" in [column.title for column in layout(GPU_COLUMNS, 10, show_cluster=True)]
    assert len(layout(GPU_COLUMNS, 200, show_cluster=True)) == len(GPU_COLUMNS)


def test_top_once_on_an_exporter_with_a_hostile_label_prints_no_control_character() -> None:
    with serve_metrics(HOSTILE_METRICS.encode) as target:
        for view in ("gpus", "pods"):
            out = io.StringIO()
            assert main(["--exporter", f"http://{target}", "--once", "--view", view], stdout=out) == 0
            text = out.getvalue()
            assert "evil\\x1b]0;pwned\\x07" in text, text
            assert not any(ord(char) < 0x20 and char != "\n" for char in text), repr(text)


def test_a_health_reason_longer_than_state_is_never_cut_at_any_width() -> None:
    """``UNHEALTHY retired_pages_pending`` does not fit the 20 columns of STATE: the cell says UNHEALTHY and
    the reason stands whole on the line under the row (with the alert), never ``retired_p~``."""
    node = busy_node("node-a")
    gpu = node.view["gpus"][1]
    gpu["health_reason"] = "retired_pages_pending"
    gpu["conditions"] = [{"id": "retired_pages_pending", "alert": "GpuRetiredPagesPending", "severity": "warning",
                          "text": "memory pages wait for a reset to be retired"}]
    reading = Reading(nodes=[node], errors=[])
    shown = screen(reading.nodes, Filters(), "name")
    texts = [once_text(reading, shown, "gpus", now=NOW)]
    texts += ["\n".join(text for _, text in gpu_lines(shown.gpus, False, width)) for width in (80, 160)]
    for text in texts:
        row = next(line for line in text.splitlines() if line.startswith("node-a") and " 1 " in line)
        assert "UNHEALTHY" in row and "retired_p" not in row, row
        assert "    CRITICAL: unhealthy: retired_pages_pending" in text, text


def test_pods_shows_whole_names_that_fit_and_counts_the_rest_at_80_and_160_columns() -> None:
    """Four pods share GPU 1 (time-slicing): at 80 columns PODS lists the names that fit whole and "+N" for
    the others, never a name cut with "~"; at 160 more fit; ``--once`` (no width) lists every one."""
    node = busy_node("node-a")
    pods = ["ml/train-0", "ml/train-1", "ml/train-2", "ml/train-3"]
    node.view["gpus"][1]["containers"] = [
        {"namespace": pod.split("/")[0], "pod": pod.split("/")[1], "container": "main", "team": "ml",
         "gpu_instance_id": None, "sm_util_percent": 10.0, "memory_used_mib": 1000.0} for pod in pods]
    reading = Reading(nodes=[node])
    shown = screen(reading.nodes, Filters(), "name")

    def gpu1_row(width: int | None) -> str:
        text = once_text(reading, shown, "gpus", now=NOW) if width is None else \
            "\n".join(text for _, text in gpu_lines(shown.gpus, False, width))
        return next(line for line in text.splitlines() if line.startswith("node-a") and " 1 " in line)

    narrow = gpu1_row(80)
    assert len(narrow) <= 80 and "~" not in narrow
    assert narrow.endswith("ml/train-0 +3"), narrow
    wide = gpu1_row(160)
    assert len(wide) <= 160 and "~" not in wide
    assert wide.endswith("ml/train-0,ml/train-1,ml/train-2,ml/train-3"), wide  # every name fits at 160
    assert gpu1_row(None).endswith(",".join(pods))


def test_a_pods_cell_never_cuts_a_name() -> None:
    names = ["ml/train-0", "ml/train-1", "research/a-very-long-notebook-name-0"]
    assert pods_cell(names, 0) == ",".join(names)  # no width: every name
    assert pods_cell(names, 24) == "ml/train-0,ml/train-1 +1"
    assert pods_cell(names, 13) == "ml/train-0 +2"
    assert pods_cell(names[2:], 20) == "1 pod"  # not even one fits whole: the count
    assert pods_cell(names[1:], 12) == "2 pods"
    assert pods_cell([], 12) == "-"
    assert pods_cell([HOSTILE], 0) == printable(HOSTILE)


def test_a_bar_drops_its_parts_by_priority_and_keeps_what_never_drops() -> None:
    parts = [Part("keep", 0), Part("second", 1), Part("first", 2), Part("also", 0)]
    assert fit_parts(parts, None, " | ") == "keep | second | first | also"
    assert fit_parts(parts, 28, " | ") == "keep | second | first | also"  # 28 characters: fits
    assert fit_parts(parts, 27, " | ") == "keep | second | also"
    assert fit_parts(parts, 18, " | ") == "keep | also"
    assert fit_parts(parts, 5, " | ") == "keep | also"  # longer than 5: the title wraps it, never clips it

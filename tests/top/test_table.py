"""``top --once`` text and the column layout, as printed: a hostile label is escaped, never sent to the
terminal; every column at no width limit; columns drop by their declared priority."""

from __future__ import annotations

import io

from exporter.top.cli import main
from exporter.top.model import Filters, screen
from exporter.top.sources import Reading, SourceError
from exporter.top.table import GPU_COLUMNS, gpu_lines, layout, once_text, printable
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

"""`gpu-pod-exporter top` driven in tmux, keys in and screens out, as a user at a terminal sees it.

Against a simulated exporter (one node) and against a real Prometheus (Debian's 2.42) holding two
clusters: GPUs sorted by use, the allocated-but-idle GPU highlighted, arrow keys moving the focus,
Tab to the pods, filters typed at ``/``, one Prometheus query per refresh, and a clear line when the
source goes away. Two exporters (8 + 3 GPUs) at 160 and 80 columns, one of them killed: its 8 GPUs
stay, marked STALE with the time last seen, STATE and every reason kept at 80 columns.
``UPDATE_CAPTURES=1`` saves the screens to docs/images/top-*.txt (the README's) and the source-down
captures to docs/screenshots/top-160.txt and top-80.txt.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.top.ui import KEY_HINTS
from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusHarness
from tests.top.tmux import Pane

pytestmark = pytest.mark.e2e

SCENARIO = str(REPO_ROOT / "tests" / "fixtures" / "top-node.yaml")
DEADLINE_S = 60.0
FOCUS = re.compile(r"^(?:\x1b\[[0-9;]*m)*")
HEADER = "NODE               GPU"


def top(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter", "top", *args]


CAPTURE_BLOCK = re.compile(r"(<!-- top-capture: docs/images/top-prometheus.txt -->\n```text\n).*?(```)", re.DOTALL)
SHOWN_IN = (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "top.md")


def save(name: str, screen: str, folder: str = "images") -> None:
    """With UPDATE_CAPTURES=1: the screen to docs/FOLDER/NAME, and into the docs that show it."""
    if not os.environ.get("UPDATE_CAPTURES"):
        return
    text = "\n".join(line.rstrip() for line in screen.split("\n") if line.strip()) + "\n"
    (REPO_ROOT / "docs" / folder).mkdir(exist_ok=True)
    (REPO_ROOT / "docs" / folder / name).write_text(text, encoding="utf-8")
    if name == "top-prometheus.txt":
        for doc in SHOWN_IN:
            doc.write_text(CAPTURE_BLOCK.sub(lambda m: m.group(1) + text + m.group(2),
                                             doc.read_text(encoding="utf-8")), encoding="utf-8")


def test_the_readme_and_docs_show_the_captured_screen() -> None:
    capture = (REPO_ROOT / "docs" / "images" / "top-prometheus.txt").read_text(encoding="utf-8")
    for doc in SHOWN_IN:
        match = CAPTURE_BLOCK.search(doc.read_text(encoding="utf-8"))
        assert match is not None and match.group(0).endswith(capture + "```"), doc


def table(screen: str, header: str = HEADER, conditions: bool = False) -> list[str]:
    """The rows under the column header, up to the first blank line; with ``conditions`` also the
    indented condition lines under each GPU."""
    lines = screen.split("\n")
    start = next((i for i, line in enumerate(lines) if header in line), len(lines)) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        if conditions or not line.startswith(" "):
            rows.append(line)
    return rows


def focused(screen_with_escapes: str) -> int:
    """Index (in ``table``: GPU or pod rows, not condition lines) of the row drawn in reverse video."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen_with_escapes).split("\n")
    lines = screen_with_escapes.split("\n")
    start = next(i for i, line in enumerate(plain) if "UTIL%" in line) + 1
    index = -1
    for line, text in zip(lines[start:], plain[start:], strict=True):
        if not text.strip():
            break
        if text.startswith(" "):
            continue  # a condition line of the row above
        index += 1
        prefix = FOCUS.match(line)
        assert prefix is not None
        codes = [code for seq in re.findall(r"\x1b\[([0-9;]*)m", prefix.group(0)) for code in seq.split(";")]
        if "7" in codes:
            return index
    raise AssertionError("no focused row:\n" + "\n".join(plain))


def util(row: str) -> int:
    return int(row.split("HBM3")[1].split(maxsplit=1)[0])


@pytest.fixture
def pane_factory() -> Iterator[Any]:
    panes: list[Pane] = []

    def make(command: list[str], **kwargs: Any) -> Pane:
        pane = Pane(command, **kwargs)
        panes.append(pane)
        return pane

    yield make
    for pane in panes:
        pane.close()


def test_top_on_one_simulated_node_sorts_highlights_navigates_filters_and_says_when_the_node_is_gone(
        pane_factory: Any) -> None:
    with running_exporter(["--simulate", SCENARIO, "-c", "500"]) as exporter:
        exporter.wait_healthy()
        pane = pane_factory(top("--exporter", f"http://127.0.0.1:{exporter.port}", "--interval", "1s"))
        screen = pane.wait_for(lambda s: HEADER in s and len(table(s)) == 4, DEADLINE_S, "four GPU rows")
        rows = table(screen)
        assert [util(row) for row in rows] == sorted((util(row) for row in rows), reverse=True)  # busiest first
        idle = [row for row in rows if "ALLOCATED IDLE" in row]
        assert len(idle) == 1 and "research/forgotten-0" in idle[0]
        assert any(re.search(r" free +-$", row.rstrip()) for row in rows)
        # The idle GPU's condition, with its reason and its alert, on the line under it.
        lines = table(screen, conditions=True)
        below = lines[lines.index(idle[0]) + 1]
        assert below.startswith("    WARNING: allocated, utilisation 0 %") and "[GpuAllocatedButIdle]" in below
        assert "4 GPUs, 3 allocated, 1 allocated but idle" in screen
        colored = pane.capture(escapes=True)
        idle_line = next(line for line in colored.split("\n") if "ALLOCATED IDLE" in line)
        assert "\x1b[30m\x1b[103m" in idle_line or "43m" in idle_line  # drawn on yellow
        save("top-node.txt", screen)

        # Keyboard navigation: the focus starts on the first row and follows the keys. (The two busy
        # GPUs may swap places between refreshes and the focus follows its GPU, so the moves checked
        # are among the two idle rows at the bottom, whose order never changes.)
        assert focused(pane.capture(escapes=True)) == 0
        pane.send("End")
        pane.wait_for(lambda s: focused(s) == 3, DEADLINE_S, "the focus on the last row", escapes=True)
        pane.send("Up")
        pane.wait_for(lambda s: focused(s) == 2, DEADLINE_S, "the focus one row up", escapes=True)

        pane.send("Tab")
        screen = pane.wait_for(lambda s: "pods by use" in s and "chat-api-0" in s, DEADLINE_S, "the pods view")
        pods = table(screen, "NAMESPACE")
        assert len(pods) == 5 and pods[-1].split()[:2] == ["research", "forgotten-0"] and pods[-1].endswith("IDLE")
        assert "<img src=x" in screen  # a hostile team label is text in a terminal too

        pane.send("/")
        pane.send("-l", "namespace=research")
        pane.send("Enter")
        screen = pane.wait_for(lambda s: "filter: namespace=research" in s and len(table(s, "NAMESPACE")) == 2,
                               DEADLINE_S, "the research pods only")
        assert {row.split()[1] for row in table(screen, "NAMESPACE")} == {"notebook-0", "forgotten-0"}
        pane.send("s")
        pane.wait_for(lambda s: "pods by memory" in s, DEADLINE_S, "sorting by memory")
        pane.send("c")
        pane.wait_for(lambda s: "filter: none" in s and len(table(s, "NAMESPACE")) == 5, DEADLINE_S,
                      "the filter cleared")

        exporter.stop()
        down = f"SOURCE DOWN http://127.0.0.1:{exporter.port}/metrics: cannot reach the exporter"
        screen = pane.wait_for(lambda s: down in s, DEADLINE_S, "the source-down line")
        # Its rows stay, marked stale, and the line above says when they were last seen.
        assert "STALE node-page-demo: last seen " in screen
        pods = table(screen, "NAMESPACE")  # the pods view is open
        assert len(pods) == 5 and all(" STALE " in row for row in pods)
    pane.send("q")
    pane.wait_for(lambda s: "EXITED 0" in s, DEADLINE_S, "top to exit with status 0")


class TwoClusterPrometheus(PrometheusHarness):
    """One exporter scraped twice, as cluster ``east`` and as cluster ``west`` (the target label)."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        job = config["scrape_configs"][0]
        job["static_configs"] = [{"targets": self.targets, "labels": {"cluster": name}} for name in ("east", "west")]
        return config


def test_top_over_prometheus_shows_both_clusters_filters_one_asks_one_query_per_refresh_and_says_what_is_down(
        pane_factory: Any) -> None:
    with running_exporter(["--simulate", SCENARIO, "-c", "500"]) as exporter:
        exporter.wait_healthy()
        with TwoClusterPrometheus([f"127.0.0.1:{exporter.port}"]) as prometheus:
            prometheus.wait_for("DCGM_EXP_GPU_ALLOCATION_INFO", lambda samples: len(samples) == 10, DEADLINE_S)
            pane = pane_factory(top("--prometheus", prometheus.url, "--interval", "1s"))
            header = "CLUSTER      NODE"
            screen = pane.wait_for(lambda s: header in s and len(table(s, header)) == 8, DEADLINE_S,
                                   "eight GPU rows, four per cluster")
            assert "clusters: east,west" in screen
            rows = table(screen, header)
            assert sorted(row.split()[0] for row in rows) == ["east"] * 4 + ["west"] * 4
            assert sum("ALLOCATED IDLE" in row for row in rows) == 2  # one per cluster
            save("top-prometheus.txt", screen)

            pane.send("/")
            pane.send("-l", "cluster=west team=ml")
            pane.send("Enter")
            screen = pane.wait_for(lambda s: "filter: cluster=west team=ml" in s and len(table(s, header)) == 1,
                                   DEADLINE_S, "west's GPU of team ml only")
            assert table(screen, header)[0].split()[0] == "west" and "training/trainer-0" in table(screen, header)[0]

            # The load on Prometheus: one query per refresh (tests/top/test_sources.py counts them request by request).
            pane.wait_for(lambda s: re.search(r"\| ([3-9]|\d\d+) refreshes, each 1 Prometheus query$",
                                              s.split("\n")[0].rstrip()) is not None, DEADLINE_S,
                          "three refreshes, each one query")

            # An exporter Prometheus can no longer scrape: its own line (one per cluster here), same one query.
            exporter.stop()
            pane.send("c")
            screen = pane.wait_for(lambda s: s.count("SOURCE DOWN exporter ") == 2, DEADLINE_S,
                                   "the exporter-down lines")
            assert f"SOURCE DOWN exporter east/127.0.0.1:{exporter.port}: Prometheus cannot scrape it (up == 0" \
                in screen
            assert "refreshes, each 1 Prometheus query" in screen
            url = prometheus.url
        # While Prometheus shuts down it may answer errors first; the line settles on "cannot reach".
        pane.wait_for(lambda s: f"SOURCE DOWN {url}: cannot reach {url}" in s, DEADLINE_S, "the source-down line")
    pane.send("q")
    pane.wait_for(lambda s: "EXITED 0" in s, DEADLINE_S, "top to exit with status 0")


def test_top_with_one_of_two_exporters_down_keeps_its_gpus_stale_at_160_and_80_columns(pane_factory: Any) -> None:
    """The issue's "11 GPUs become 3": an 8-GPU node and a 3-GPU node, then the 8-GPU node's exporter
    is killed. Both widths keep all 11 GPUs, the 8 marked STALE with the time last seen, STATE in the
    header and every condition's reason in full (wrapped, not cut) at 80 columns."""
    with running_exporter(["--simulate", "default", "-c", "500"]) as big, \
            running_exporter(["--simulate", "shared-gpus", "-c", "500"]) as small:
        big.wait_healthy()
        small.wait_healthy()
        urls = ["--exporter", f"http://127.0.0.1:{big.port}", "--exporter", f"http://127.0.0.1:{small.port}"]
        panes = {width: pane_factory(top(*urls, "--interval", "1s", "--sort", "name"), width=width, height=70)
                 for width in (160, 80)}
        for pane in panes.values():
            pane.wait_for(lambda s: "11 GPUs" in s and len(table(s)) == 11, DEADLINE_S, "eleven GPU rows")
        big.process.kill()
        big.process.wait()
        down = f"SOURCE DOWN http://127.0.0.1:{big.port}/metrics: cannot reach the exporter"
        for width, pane in panes.items():
            # Waited until the rows have been stale for a few seconds: the ages move on, the rows stay.
            screen = pane.wait_for(lambda s: down in " ".join(s.split()) and "8 STALE" in s
                                   and (m := re.search(r"last seen \S+ \((\d+)s ago\)", s)) is not None
                                   and int(m.group(1)) >= 5, DEADLINE_S,
                                   f"the source-down line at {width} columns, 5 s on")
            lines = [line for line in screen.split("\n") if line.strip()]
            assert all(len(line) <= width for line in lines)
            assert "11 GPUs" in screen and "STALE hgx-node-01: last seen " in screen
            header = next(line for line in lines if HEADER in line)
            assert "STATE" in header and "UTIL%" in header and "AGE" in header
            rows = table(screen)
            assert len(rows) == 11
            assert sorted(row.split()[0] for row in rows if " STALE " in row) == ["hgx-node-01"] * 8
            assert not any(" STALE " in row for row in rows if row.startswith("shared-node"))
            # Nothing clipped: the title and the key hints drop whole parts by priority, PODS cuts no name.
            assert lines[0].startswith(" gpu-pod-exporter top | GPUs by name | filter: none | clusters: -")
            assert ("refreshes, each" in lines[0]) == (width == 160)
            hints = next(line for line in reversed(lines) if line.startswith("? help"))
            assert set(hints.split("  ")) <= {part.text for part in KEY_HINTS}
            assert ("arrows/pgup/pgdn/home/end move" in hints) == (width == 160)
            assert not any("~" in row for row in rows), rows
            # Every condition line is whole: its alert name closes it, on its own line or the next.
            conditions = " ".join(line.strip() for line in table(screen, conditions=True) if line.startswith(" "))
            assert conditions.count("[Gpu") == conditions.count("]") and conditions.count("[Gpu") > 0
            save(f"top-{width}.txt", screen, folder="screenshots")
    for pane in panes.values():
        pane.send("q")
        pane.wait_for(lambda s: "EXITED 0" in s, DEADLINE_S, "top to exit with status 0")


def test_question_mark_shows_the_keys_in_the_terminal(pane_factory: Any) -> None:
    with running_exporter(["--simulate", SCENARIO, "-c", "500"]) as exporter:
        exporter.wait_healthy()
        pane = pane_factory(top("--exporter", f"http://127.0.0.1:{exporter.port}", "--interval", "1s"), width=80)
        pane.wait_for(lambda s: len(table(s)) == 4, DEADLINE_S, "four GPU rows")
        pane.send("?")
        screen = pane.wait_for(lambda s: "Keys" in s and "refresh now" in s, DEADLINE_S, "the help screen")
        assert "ctrl-u clears" in screen and "quit" in screen
        pane.send("x")
        pane.wait_for(lambda s: len(table(s)) == 4, DEADLINE_S, "the GPU rows back")
        pane.send("q")
        pane.wait_for(lambda s: "EXITED 0" in s, DEADLINE_S, "top to exit with status 0")

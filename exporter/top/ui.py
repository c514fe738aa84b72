"""The terminal UI of ``gpu-pod-exporter top`` (urwid).

Why urwid (docs/top.md says more): a ListBox with keyboard focus, scrolling and palettes is all this
view needs, and urwid gives it with one small dependency (wcwidth) and a plain raw-terminal main loop
that starts in a fraction of a second; Textual would bring rich, markdown and an async app framework
for a table. Both are maintained; urwid has been since 2004.

Reading the sources runs in a worker thread (a slow Prometheus never freezes the keyboard); the
worker hands its result to the main loop through ``watch_pipe``. One read at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, cast

import urwid

from exporter.top.model import SORTS, Filters, NodeView, Screen, screen
from exporter.top.sources import Reading
from exporter.top.table import Line, gpu_lines, pod_lines, status_lines, summary

PALETTE = [
    ("header", "bold", ""),
    ("title", "black", "light gray"),
    ("idle", "black", "yellow"),
    ("bad", "white", "dark red"),
    ("down", "white,bold", "dark red"),
    ("focus", "standout", ""),
    ("help", "black", "light gray"),
]
HELP = "q quit  tab gpus/pods  s sort  / filter  c clear filter  r refresh  arrows/pgup/pgdn/home/end move"


class _Row(urwid.Text):  # type: ignore[misc,unused-ignore]  # urwid 2.6.0 ships no annotations
    """A selectable line: the ListBox moves focus over it with the arrow keys."""

    _selectable = True

    def keypress(self, size: Any, key: str) -> str:
        return key


class TopApp:
    def __init__(self, read: Callable[[Filters], Reading], filters: Filters, *, interval_s: float, sort: str,
                 idle_below: float, view: str = "gpus") -> None:
        self.read = read
        self.filters = filters
        self.interval_s = interval_s
        self.sort = sort
        self.idle_below = idle_below
        self.view = view
        self.nodes: list[NodeView] = []
        self.reading = Reading()
        self.refreshes = 0
        self._pending: Reading | None = None
        self._busy = threading.Lock()
        self._title = urwid.Text("", wrap="clip")
        self._summary = urwid.Text("", wrap="clip")
        self._columns = urwid.Text("", wrap="clip")
        self._keys: list[tuple[object, ...]] = []
        self._walker: urwid.SimpleFocusListWalker[urwid.Widget] = urwid.SimpleFocusListWalker([])
        self._list = urwid.ListBox(cast(Any, self._walker))  # urwid's annotations want flow widgets only
        self._help = urwid.Text(HELP, wrap="clip")
        self._edit: urwid.Edit | None = None
        self._footer: urwid.AttrMap[urwid.Widget] = urwid.AttrMap(self._help, "help")
        header = urwid.Pile([urwid.AttrMap(self._title, "title"), self._summary,
                             urwid.AttrMap(self._columns, "header")])
        self.frame = urwid.Frame(self._list, header=header, footer=self._footer)
        self.loop: urwid.MainLoop | None = None
        self._pipe: int | None = None

    # -- data ----------------------------------------------------------------------------------

    def _fetch(self) -> None:
        if not self._busy.acquire(blocking=False):
            return
        filters = self.filters

        def work() -> None:
            try:
                reading = self.read(filters)
            finally:
                self._busy.release()
            self._pending = reading
            if self._pipe is not None:
                os.write(self._pipe, b"1")

        threading.Thread(target=work, name="top-read", daemon=True).start()

    def _arrived(self, _data: bytes) -> bool:
        reading, self._pending = self._pending, None
        if reading is not None:
            self.reading = reading
            self.nodes = reading.nodes
            self.refreshes += 1
            self.redraw()
        return True

    def _tick(self, loop: urwid.MainLoop, _user: Any) -> None:
        self._fetch()
        loop.set_alarm_in(self.interval_s, self._tick)

    # -- drawing -------------------------------------------------------------------------------

    def current(self) -> Screen:
        return screen(self.nodes, self.filters, self.sort, self.idle_below)

    def lines(self) -> tuple[list[Line], list[Line], str, str, list[tuple[object, ...]]]:
        """(status lines, table lines, summary, title, a key per table row) for the current data."""
        shown = self.current()
        show_cluster = bool(shown.clusters)
        if self.view == "gpus":
            table = gpu_lines(shown.gpus, show_cluster)
            keys: list[tuple[object, ...]] = [(row.cluster, row.node, row.gpu) for row in shown.gpus]
        else:
            table = pod_lines(shown.pods, show_cluster)
            keys = [(row.cluster, row.node, row.namespace, row.pod, row.container, row.gpu) for row in shown.pods]
        title = (f" gpu-pod-exporter top | {'GPUs' if self.view == 'gpus' else 'pods'} by {self.sort} | "
                 f"filter: {self.filters.describe()} | clusters: {','.join(shown.clusters) or '-'} | "
                 f"{self.refreshes} refreshes, each {self.reading.cost()}")
        return status_lines(self.reading.errors), table, summary(shown), title, keys

    def redraw(self) -> None:
        status, table, text, title, keys = self.lines()
        self._title.set_text(title)
        # Source-down lines sit above the summary in the same text widget, each on its own red line.
        markup: list[tuple[str, str] | str] = [(style, line + "\n") for style, line in status]
        markup.append(" " + text if self.refreshes else " reading...")
        self._summary.set_text(markup)
        self._columns.set_text(table[0][1])
        position = self._list.focus_position if self._walker else 0
        focused = self._keys[position] if position < len(self._keys) else None
        self._walker[:] = [urwid.AttrMap(_Row(line, wrap="clip"), style or None, "focus") for style, line in table[1:]]
        self._keys = keys
        if self._walker:
            # The focus stays on the same GPU or pod when a refresh reorders the rows by use.
            self._list.focus_position = keys.index(focused) if focused in keys else min(position, len(keys) - 1)

    def focused_key(self) -> tuple[object, ...] | None:
        """The GPU or pod the focus is on (tests; what a detail view would open)."""
        return self._keys[self._list.focus_position] if self._walker else None

    # -- keys ----------------------------------------------------------------------------------

    def _input(self, key: str | tuple[Any, ...]) -> bool | None:
        if not isinstance(key, str):
            return None
        if self._edit is not None:
            return self._edit_key(key)
        if key in ("q", "Q"):
            raise urwid.ExitMainLoop
        if key == "tab":
            self.view = "pods" if self.view == "gpus" else "gpus"
        elif key == "g":
            self.view = "gpus"
        elif key == "p":
            self.view = "pods"
        elif key == "s":
            self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        elif key in ("/", "f"):
            self._edit = urwid.Edit("filter (cluster= node= namespace= team=, enter to apply, esc to cancel): ",
                                    " ".join(f"{k}={v}" for k, v in self.filters.values.items()))
            self._footer.original_widget = self._edit
            self.frame.focus_position = "footer"
            return True
        elif key == "c":
            self.filters = Filters()
            self._fetch()
        elif key == "r":
            self._fetch()
        else:
            return None
        self.redraw()
        return True

    def _edit_key(self, key: str) -> bool | None:
        assert self._edit is not None
        if key == "esc":
            self._close_edit(HELP)
        elif key == "enter":
            try:
                self.filters = Filters.parse(self._edit.edit_text)
            except ValueError as error:
                self._close_edit(str(error))
                return True
            self._close_edit(HELP)
            self._fetch()
        else:
            return None
        self.redraw()
        return True

    def _close_edit(self, message: str) -> None:
        self._edit = None
        self._help.set_text(message)
        self._footer.original_widget = self._help
        self.frame.focus_position = "body"

    def run(self) -> None:
        self.redraw()
        self.loop = urwid.MainLoop(self.frame, PALETTE, unhandled_input=self._input,
                                   handle_mouse=False)
        self._pipe = self.loop.watch_pipe(self._arrived)
        self.loop.set_alarm_in(0, self._tick)
        try:
            self.loop.run()
        finally:
            if self._pipe is not None:
                self.loop.remove_watch_pipe(self._pipe)
                os.close(self._pipe)
                self._pipe = None

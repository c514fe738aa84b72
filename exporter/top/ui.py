"""The terminal UI of ``gpu-pod-exporter top`` (urwid).

Why urwid (docs/top.md says more): a ListBox with keyboard focus, scrolling and palettes is all this
view needs, and urwid gives it with one small dependency (wcwidth) and a plain raw-terminal main loop
that starts in a fraction of a second; Textual would bring rich, markdown and an async app framework
for a table. Both are maintained; urwid has been since 2004.

Reading the sources runs in a worker thread (a slow Prometheus never freezes the keyboard); the
worker hands its result to the main loop through ``watch_pipe``. One read at a time. The read goes
through ``LastSeen``: a source that goes down keeps its last rows on screen, marked stale with the
time they were last seen (``exporter.top.lastseen``).

The table is laid out for the terminal's width (``exporter.top.table``: columns drop by priority,
STATE and every condition's reason stay), and again when the width changes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import urwid

from exporter.top.lastseen import LastSeen
from exporter.top.model import SORTS, Filters, NodeView, Screen, screen
from exporter.top.sources import Reading
from exporter.top.table import (
    Block,
    Line,
    Part,
    fit_parts,
    gpu_blocks,
    node_conditions,
    pod_blocks,
    printable,
    status_lines,
    summary,
)

PALETTE = [
    ("header", "bold", ""),
    ("title", "black", "light gray"),
    ("idle", "black", "yellow"),
    ("bad", "white", "dark red"),
    ("down", "white,bold", "dark red"),
    ("focus", "standout", ""),
    ("help", "black", "light gray"),
    ("stale", "light gray", "dark gray"),
]
# The key-hint bar, in its order on screen; on a narrow terminal the highest priority drops first. "? help"
# never drops: ``?`` lists every key.
KEY_HINTS = (
    Part("? help", 0), Part("q quit", 1), Part("tab gpus/pods", 3), Part("s sort", 4), Part("/ filter", 2),
    Part("c clear filter", 6), Part("r refresh", 5), Part("arrows/pgup/pgdn/home/end move", 7),
)
KEY_SEPARATOR = "  "
KEYS = (
    ("?", "this help (any key closes it)"),
    ("up down pgup pgdn home end", "move the focus; it stays on its GPU or pod when a refresh reorders the rows"),
    ("tab, g, p", "switch between the GPU list and the pod list (g: GPUs, p: pods)"),
    ("s", "sort by use, by memory, by name (cycles)"),
    ("/ or f", "edit the filter: cluster=... node=... namespace=... team=...; it opens with the current filter, "
               "typing replaces it, left/right/backspace edit it, ctrl-u clears, enter applies, esc cancels"),
    ("c", "clear the filter"),
    ("r", "refresh now"),
    ("q", "quit"),
)
ROWS_HELP = ("Rows: AGE is how old a node's data is; STALE past its bound, or when its source is down (its "
             "last rows stay, greyed, with the time last seen). Each GPU's conditions are listed under it with "
             "their reason and alert; STATE: UNHEALTHY, CRITICAL, ALLOCATED IDLE, WARNING, in use, free.")
# The focused row is drawn in reverse video whatever its style (idle, bad, stale), as before conditions.
FOCUS_MAP: dict[str | None, str] = {style: "focus" for style in (None, "idle", "bad", "stale")}
EDIT_CAPTION = "filter (typing replaces, arrows edit, enter applies, esc cancels): "
DEFAULT_WIDTH = 160  # before the terminal is known (tests without a screen)


class FilterEdit(urwid.Edit):  # type: ignore[misc,unused-ignore]  # urwid 2.6.0 ships no annotations
    """The filter editor: opens holding the current filter, selected, so typing replaces it while the
    arrows, Home/End and Backspace edit it instead; Ctrl-U clears it."""

    def __init__(self, text: str) -> None:
        super().__init__(EDIT_CAPTION, text)
        self.replacing = bool(text)

    def keypress(self, size: Any, key: str) -> str | None:
        if key == "ctrl u":
            self.set_edit_text("")
            self.replacing = False
            return None
        if self.replacing:
            self.replacing = False
            if len(key) == 1 and key.isprintable():
                self.set_edit_text("")
        result: str | None = super().keypress(size, key)
        return result


class _Row(urwid.Text):  # type: ignore[misc,unused-ignore]  # urwid 2.6.0 ships no annotations
    """A selectable line: the ListBox moves focus over it with the arrow keys."""

    _selectable = True

    def keypress(self, size: Any, key: str) -> str:
        return key


class TopApp:
    def __init__(self, read: Callable[[Filters], Reading], filters: Filters, *, interval_s: float, sort: str,
                 idle_below: float, view: str = "gpus") -> None:
        self.last_seen = LastSeen(read)
        self.read: Callable[[Filters], Reading] = self.last_seen
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
        self._title = urwid.Text("")  # fitted by dropping parts; what must stay wraps, never clips
        self._summary = urwid.Text("")  # wrapped: a source-down or stale line is read in full at any width
        self._columns = urwid.Text("", wrap="clip")
        self._keys: list[tuple[object, ...]] = []
        self._walker: urwid.SimpleFocusListWalker[urwid.Widget] = urwid.SimpleFocusListWalker([])
        self._list = urwid.ListBox(cast(Any, self._walker))  # urwid's annotations want flow widgets only
        self._help = urwid.Text(fit_parts(KEY_HINTS, None, KEY_SEPARATOR))  # fitted to the width; an error wraps
        self._footer_message: str | None = None  # a filter error in place of the key hints
        self._edit: FilterEdit | None = None
        self.width = DEFAULT_WIDTH
        self.help_open = False
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
        self.redraw()  # the ages grow between reads, and the width may have changed
        loop.set_alarm_in(self.interval_s, self._tick)

    # -- drawing -------------------------------------------------------------------------------

    def current(self) -> Screen:
        return screen(self.nodes, self.filters, self.sort, self.idle_below)

    def lines(self) -> tuple[list[Line], str, list[Block], str, str, list[tuple[object, ...]]]:
        """(status lines, column header, a block per table row, summary, title, a key per row) for the
        current data at ``self.width``."""
        shown = self.current()
        show_cluster = bool(shown.clusters)
        ages = self.last_seen.freshness(self.nodes)  # at the clock's now: the ages grow between reads
        if self.view == "gpus":
            head, blocks = gpu_blocks(shown.gpus, show_cluster, self.width, ages)
            keys: list[tuple[object, ...]] = [(row.cluster, row.node, row.gpu) for row in shown.gpus]
        else:
            head, blocks = pod_blocks(shown.pods, show_cluster, self.width, ages)
            keys = [(row.cluster, row.node, row.namespace, row.pod, row.container, row.gpu) for row in shown.pods]
        title = fit_parts(self.title_parts(shown.clusters), self.width, " | ")
        status = status_lines(self.reading.errors, self.last_seen.missing(), node_conditions(self.nodes),
                              now=self.last_seen.clock)
        return status, head, blocks, summary(shown, ages), title, keys

    def title_parts(self, clusters: Sequence[str]) -> list[Part]:
        """The title bar's parts: what is shown and how (view, sort, filter) never drops, since it says why
        rows are missing; the clusters read and the refresh count drop first on a narrow terminal."""
        view = "GPUs" if self.view == "gpus" else "pods"
        return [Part(" gpu-pod-exporter top", 0), Part(f"{view} by {self.sort}", 0),
                Part(f"filter: {printable(self.filters.describe())}", 0),
                Part(f"clusters: {printable(','.join(clusters)) or '-'}", 1),
                Part(f"{self.refreshes} refreshes, each {self.reading.cost()}", 2)]

    def redraw(self) -> None:
        if self.loop is not None:
            self.width = self.loop.screen.get_cols_rows()[0]
        status, head, blocks, text, title, keys = self.lines()
        self._title.set_text(title)
        # Source-down, stale-node and node-condition lines sit above the summary, each on its own line.
        markup: list[tuple[str, str] | str] = [(style, line + "\n") for style, line in status]
        markup.append(" " + text if self.refreshes else " reading...")
        self._summary.set_text(markup)
        self._columns.set_text(head)
        self._help.set_text(self._footer_message or fit_parts(KEY_HINTS, self.width, KEY_SEPARATOR))
        if self.help_open:
            return
        position = self._list.focus_position if self._walker else 0
        focused = self._keys[position] if position < len(self._keys) else None
        self._walker[:] = [urwid.AttrMap(_Row(self._markup(block), wrap="clip"), None, FOCUS_MAP)
                         for block in blocks]
        self._keys = keys
        if self._walker:
            # The focus stays on the same GPU or pod when a refresh reorders the rows by use.
            self._list.focus_position = keys.index(focused) if focused in keys else min(position, len(keys) - 1)

    @staticmethod
    def _markup(block: Block) -> list[tuple[str, str] | str]:
        """One GPU's lines as urwid markup: its row in its style, each condition line in its own."""
        markup: list[tuple[str, str] | str] = []
        for index, (style, line) in enumerate(block):
            text = ("\n" if index else "") + line
            markup.append((style, text) if style else text)
        return markup

    def show_help(self) -> None:
        """``?``: the keys and what the rows mean, over the table until the next key."""
        rows: list[urwid.Widget] = [urwid.Text(("header", " Keys"))]
        rows += [urwid.Columns([(30, urwid.Text("  " + key)), urwid.Text(what)]) for key, what in KEYS]
        rows += [urwid.Divider(), urwid.Text(" " + ROWS_HELP), urwid.Divider(),
                 urwid.Text(" Press any key to go back.")]
        self.help_open = True
        self.frame.body = urwid.ListBox(cast(Any, urwid.SimpleListWalker(cast(Any, rows))))

    def close_help(self) -> None:
        self.help_open = False
        self.frame.body = self._list
        self.redraw()

    def focused_key(self) -> tuple[object, ...] | None:
        """The GPU or pod the focus is on (tests; what a detail view would open)."""
        return self._keys[self._list.focus_position] if self._walker else None

    # -- keys ----------------------------------------------------------------------------------

    def _input(self, key: str | tuple[Any, ...]) -> bool | None:
        if not isinstance(key, str):
            return None
        if self._edit is not None:
            return self._edit_key(key)
        if self.help_open:
            self.close_help()
            return True
        if key == "?":
            self.show_help()
            return True
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
            self._edit = FilterEdit(" ".join(f"{k}={v}" for k, v in self.filters.values.items()))
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
            self._close_edit(None)
        elif key == "enter":
            try:
                self.filters = Filters.parse(self._edit.edit_text)
            except ValueError as error:
                self._close_edit(str(error))
                return True
            self._close_edit(None)
            self._fetch()
        else:
            return None
        self.redraw()
        return True

    def _close_edit(self, message: str | None) -> None:
        """Back to the key hints, or ``message`` (a filter error) in their place until the next edit."""
        self._edit = None
        self._footer_message = message
        self._help.set_text(message or fit_parts(KEY_HINTS, self.width, KEY_SEPARATOR))
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

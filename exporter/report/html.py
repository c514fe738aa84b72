"""A self-contained HTML report: the same tables as the text form, plus its plots as inline PNGs.

One file, no scripts, no external assets, so it can be mailed or attached to a ticket. Every
value from Prometheus (team, namespace and pod names, warnings) is escaped.
"""

from __future__ import annotations

import base64
from html import escape

from exporter.report.model import Report
from exporter.report.plots import PLOTS
from exporter.report.tables import Table, all_tables, formatted
from exporter.report.text import header_lines

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f2f2f2; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
.warning { background: #fff3cd; border: 1px solid #e0c060; padding: 0.5em 1em; }
img { max-width: 100%; }
"""


def _table_html(table: Table) -> str:
    headings, rows, total = formatted(table)
    numeric = [column.numeric for column in table.columns]
    out = [f"<h2>{escape(table.title)}</h2>", "<table>",
           "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in headings) + "</tr>"]
    if not rows:
        out.append(f'<tr><td colspan="{len(headings)}">{escape(table.empty)}</td></tr>')
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="n">{escape(c)}</td>' if n else f"<td>{escape(c)}</td>"
                                    for c, n in zip(row, numeric, strict=True)) + "</tr>")
    if total is not None and rows:
        out.append('<tr class="total">' + "".join(f'<td class="n">{escape(c)}</td>' if n else f"<td>{escape(c)}</td>"
                                                  for c, n in zip(total, numeric, strict=True)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def render_plots(report: Report) -> dict[str, bytes]:
    """Every plot of the report as PNG bytes, by name (``daily-gpu-hours``, ``allocated-vs-busy``)."""
    return {name: draw(report) for name, draw in PLOTS.items()}


def render_html(report: Report, plots: dict[str, bytes] | None = None) -> str:
    images = plots if plots is not None else render_plots(report)
    title = header_lines(report)[0]
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
             f"<h1>{escape(title)}</h1>"]
    parts += [f"<p>{escape(line)}</p>" for line in header_lines(report)[1:]]
    if report.warnings:
        parts.append('<div class="warning"><p><strong>Prometheus answered with warnings; the data may be '
                     "incomplete:</strong></p><ul>")
        parts += [f"<li>{escape(w)}</li>" for w in report.warnings]
        parts.append("</ul></div>")
    for name, png in images.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<p><img alt="{escape(name)}" src="data:image/png;base64,{data}"></p>')
    parts += [_table_html(table) for table in all_tables(report)]
    parts.append("<h2>How shared GPUs are split</h2><ul>")
    parts += [f"<li><strong>{escape(k)}</strong>: {escape(v)}</li>" for k, v in report.splits.items()]
    parts.append("</ul>")
    if report.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{escape(note)}</li>" for note in report.notes]
        parts.append("</ul>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"

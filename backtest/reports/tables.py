"""Tables, numbers, labels and page parts as the report pages and charts print them (the tearsheet, the
drift and study reports, the signal and portfolio pages).

A table is written twice from one frame and one cell rule (:func:`cell_text`): as markdown
(:func:`markdown_table`) and as HTML through pandas' Styler (:func:`html_table`), which can keep the column
that names the rows in view while a wide table scrolls sideways in its box.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: Decimals of the statistics in the study report's tables: a rank IC of 0.0123 reads 0.012, a Sharpe 1.234.
DECIMALS = 3
#: How the drift report prints its numbers (PSI, gain shares): four significant digits.
SIGNIFICANT_4 = "{:.4g}"


def cell_text(value: object, number: str = SIGNIFICANT_4) -> str:
    """One table cell as text: a float through ``number`` (empty when missing), a date as
    :func:`date_label`, anything else as ``str``.

    >>> cell_text(0.123456), cell_text(0.123456, "{:.3f}"), cell_text(np.nan), cell_text(pd.Timestamp("2024-01-02"))
    ('0.1235', '0.123', '', '2024-01-02')
    """
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else number.format(value)
    if value is None or value is pd.NaT:
        return ""
    return date_label(value)


def markdown_table(frame: pd.DataFrame, number: str = SIGNIFICANT_4) -> str:
    """A GitHub-flavoured markdown table of ``frame``'s columns (index not shown), cells as :func:`cell_text`.

    >>> print(markdown_table(pd.DataFrame({"feature": ["rsi"], "psi": [0.123456]})))
    | feature | psi |
    |---|---|
    | rsi | 0.1235 |
    """
    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += [
        "| " + " | ".join(cell_text(v, number).replace("|", "\\|") for v in row) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def html_table(frame: pd.DataFrame, number: str = SIGNIFICANT_4, *, row_names: str | None = None) -> str:
    """``frame`` as an HTML table (pandas' Styler) in a box that scrolls sideways when the table is wider
    than the page (:data:`PAGE_STYLE`'s ``.wide``), cells as :func:`cell_text`, on one line each.

    Parameters
    ----------
    frame : the table; its index is not shown.
    number : the format of a float cell.
    row_names : the column that names the rows (a trial, a year): printed first as the row headers and kept
        in view (sticky) while the table scrolls sideways.

    >>> page = html_table(pd.DataFrame({"trial": ["a"], "Sharpe": [1.23456]}), "{:.3f}", row_names="trial")
    >>> "position: sticky" in page, ">1.235</td>" in page, ">trial</th>" in page
    (True, True, True)
    """
    shown = frame
    if row_names is not None:
        shown = frame.set_index(row_names)
        shown.columns.name, shown.index.name = row_names, None  # the row names' heading in the corner cell
    styler = shown.style.format(lambda value: html.escape(cell_text(value, number)))
    if row_names is not None:
        styler.format_index(lambda value: html.escape(cell_text(value, number)), axis="index")
        styler.set_sticky(axis="index")
    else:
        styler.hide(axis="index")
    return f"<div class='wide'>{styler.to_html()}</div>"


def date_label(value: object) -> str:
    """Dates at midnight print as ``2024-01-02``; everything else with ``str``.

    >>> date_label(pd.Timestamp("2024-01-02")), date_label(pd.Timestamp("2024-01-02 15:00")), date_label(3)
    ('2024-01-02', '2024-01-02 15:00:00', '3')
    """
    if isinstance(value, pd.Timestamp) and value == value.normalize():
        return str(value.date())
    return str(value)


#: The house style of the report pages (the drift report, the study report, the reduced tearsheet): one
#: place, so the pages read alike; a page adds only its own rules (:func:`page_head`).
PAGE_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:right}img{max-width:100%}"
    ".wide{overflow-x:auto;max-width:100%}.wide td,.wide th{white-space:nowrap}"
    ".wide th{background:#fff}.wide tbody th{text-align:left;font-weight:normal}.wide th.index_name{text-align:left}"
)


def page_head(title: str, extra_style: str = "") -> str:
    """A report page up to its ``<body>``: the title (escaped) and :data:`PAGE_STYLE` with the page's own rules.

    >>> page_head("A & B", ".note{color:#a60}").endswith(".note{color:#a60}</style></head><body>")
    True
    >>> "<title>A &amp; B</title>" in page_head("A & B")
    True
    """
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{PAGE_STYLE}{extra_style}</style></head><body>"
    )


def format_number(value: object, spec: str, missing: str = "") -> str:
    """``value`` formatted with ``spec``; ``missing`` for None, NaN, an infinity or a value that is no number.

    >>> format_number(0.01234, "+.2%"), format_number(float("nan"), ".4f"), format_number(None, ".2f", "-")
    ('+1.23%', '', '-')
    """
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return missing
    return format(number, spec) if math.isfinite(number) else missing


def page_heading(title: str, dates: pd.DatetimeIndex) -> str:
    """``<title>: test <first>..<last>`` for a run's page title and heading; ``title`` alone without dates.

    >>> page_heading("lambdarank-all", pd.DatetimeIndex(["2024-01-02", "2025-12-31"]))
    'lambdarank-all: test 2024-01-02..2025-12-31'
    """
    return f"{title}: test {dates[0]:%Y-%m-%d}..{dates[-1]:%Y-%m-%d}" if len(dates) else title


def run_mention(title: str, run_id: str | None) -> str:
    """``Run <title> (MLflow <id>)``, escaped for a page.

    >>> run_mention("a<b", "0f3"), run_mention("a", None)
    ('Run a&lt;b (MLflow 0f3)', 'Run a')
    """
    return f"Run {html.escape(title)}" + (f" (MLflow {html.escape(run_id)})" if run_id else "")


def embedded_png(png: bytes | Path, alt: str) -> str:
    """An ``<img>`` that holds the PNG itself (base64): a page with its charts in one file, which MLflow's
    artifact view shows whole.

    >>> embedded_png(b"PNG", "IC & decay")
    "<img alt='IC &amp; decay' src='data:image/png;base64,UE5H'>"
    """
    data = png if isinstance(png, bytes) else Path(png).read_bytes()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(data).decode('ascii')}'>"


@dataclass(frozen=True)
class PageSection:
    """One section of a report page: a heading, a note, a chart (PNG bytes) and a table (HTML), each optional."""

    heading: str
    note: str = ""
    png: bytes | None = None
    table: str = ""


def write_page(path: Path | str, title: str, header: str, sections: list[PageSection]) -> Path:
    """Write a run's page (:func:`render_page`, first column of its tables left-aligned) at ``path`` (its folder
    is created); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(title, header, sections, "td:first-child{text-align:left}"), encoding="utf-8")
    return path


def render_page(title: str, header: str, sections: list[PageSection], extra_style: str = "") -> str:
    """A self-contained report page: ``<h1>`` title, a header paragraph (HTML), then each section in order.

    >>> page = render_page("Signal", "<b>IC</b>", [PageSection("Decay", "By horizon.", table="<table></table>")])
    >>> "<h2>Decay</h2><p>By horizon.</p><table></table>" in page, page.endswith("</body></html>")
    (True, True)
    """
    body = [page_head(title, extra_style), f"<h1>{html.escape(title)}</h1>", f"<p>{header}</p>"]
    for section in sections:
        body.append(f"<h2>{html.escape(section.heading)}</h2>")
        if section.note:
            body.append(f"<p>{html.escape(section.note)}</p>")
        if section.png is not None:
            body.append(embedded_png(section.png, section.heading))
        body.append(section.table)
    return "".join(body) + "</body></html>"

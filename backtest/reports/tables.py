"""Tables and labels as the report pages and charts print them (the drift report, the study report).

A table is written twice from one frame and one cell rule (:func:`cell_text`): as markdown
(:func:`markdown_table`) and as HTML through pandas' Styler (:func:`html_table`), which can keep the column
that names the rows in view while a wide table scrolls sideways in its box.
"""

from __future__ import annotations

import html

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

"""Tables and labels as the report pages and charts print them (the drift report, the study report)."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``frame``'s columns (index not shown), floats as ``%.4g``.

    >>> print(markdown_table(pd.DataFrame({"feature": ["rsi"], "psi": [0.123456]})))
    | feature | psi |
    |---|---|
    | rsi | 0.1235 |
    """

    def cell(value: object) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if np.isnan(value) else f"{value:.4g}"
        if value is pd.NaT:
            return ""
        return date_label(value).replace("|", "\\|")

    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


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

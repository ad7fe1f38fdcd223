"""Tables, numbers, labels and page parts as the report pages and charts print them (the tearsheet, the drift
and study reports, the signal and portfolio pages)."""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path

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


def html_table(frame: pd.DataFrame, *, index: bool = False) -> str:
    """``frame`` as a page's HTML table: no border, floats as ``%.4g``, missing values blank (format a column
    as text first to show it otherwise).

    >>> html_table(pd.DataFrame({"x": [0.123456, None]})).count("<td>")
    2
    """
    return frame.to_html(index=index, float_format=lambda x: f"{x:.4g}", border=0, na_rep="")


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

"""The HTML tearsheet of a backtest: quantstats, with a small self-made fallback.

quantstats 0.0.86 renders the full report offline when the benchmark is a Series (a ticker string would
download one). Its traps, handled here:

- importing it sets ``rcParams["font.family"] = "Arial"`` for the whole process and its plots ask for
  Arial by name: the import and the call run inside ``matplotlib.rc_context`` (rcParams restored after)
  with the ``matplotlib.font_manager`` logger at ERROR (no ``findfont`` flood), and the Agg backend;
- a timezone-aware index fails inside it (``Cannot compare dtypes datetime64[us, tz] and datetime64``):
  the index is made naive first (:func:`backtest.reports.returns.check_daily_returns`);
- some of its statistics break on inputs it did not expect (all-zero returns make its R^2 regression
  raise) and it has broken on pandas upgrades before: such an error, raised inside quantstats, is
  caught, logged as a warning, and a smaller report with the same headline metrics is written instead,
  so a run never fails for its tearsheet. Errors of ours (bad input, unwritable path) still raise.
- ``match_dates=False``: the report covers exactly the test period given (quantstats would otherwise
  drop leading days where either series is 0).
- its rolling charts (rolling beta, volatility, Sharpe and Sortino) use a 6-month window
  (``ceil(periods_per_year / 2)`` = 126 days; the beta's second line 12 months): on a short test they are
  empty axes. They are kept only when the test period holds at least :func:`rolling_min_days` = two such
  windows (252 trading days), so that each curve spans at least half of the period; below that they are
  removed from the page (their ``<div id="rolling_...">`` blocks), and a note says so.

The page opens with the project's own evidence, before any quantstats content (:func:`robustness_html`):
the Sharpe ratio and annual return with and without the best month and the best 3 months, the Sharpe's
bootstrap interval, PSR and DSR, rank IC and ICIR, NDCG, the strategy against the index benchmark
(excess annual return, beta, tracking error, information ratio; the index's own annual return, Sharpe
and drawdown), and the leak guard, feature audit and comparable verdicts, with a warning that says why
a run is not comparable. quantstats' own comparison is
against equal weight, the default benchmark. Those numbers are the run's own (:class:`RunEvidence`, from
the engine's metrics and guards), never recomputed here. The page title and heading name the run and its test period.
"""

from __future__ import annotations

import contextlib
import html
import logging
import math
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import matplotlib
import numpy as np
import pandas as pd

from backtest import metrics
from backtest.baselines import baseline_verdicts, comparison_table
from backtest.portfolio import DEFAULT_TOP_K
from backtest.reports.returns import check_daily_returns
from backtest.reports.tables import format_number, page_head, page_heading
from backtest.statistics import PERIODS_PER_YEAR

logger = logging.getLogger(__name__)

#: Error types quantstats raises when it meets data or a pandas version it does not handle. Caught
#: only when raised from inside the quantstats package.
QUANTSTATS_BREAKAGE: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    ZeroDivisionError,
    NotImplementedError,
)


@dataclass(frozen=True)
class Tearsheet:
    """Where the tearsheet was written and which renderer made it.

    Attributes
    ----------
    path : the HTML file.
    renderer : ``quantstats`` or ``fallback``.
    reason : why quantstats was not used (``"ValueError: ..."``), None when it was.
    """

    path: Path
    renderer: Literal["quantstats", "fallback"]
    reason: str | None = None


@dataclass(frozen=True)
class RunEvidence:
    """What a run proves beyond its returns: the numbers of the tearsheet's robustness block.

    Attributes
    ----------
    metrics : the run's headline metrics (``BacktestResult.metrics``): ``sharpe``, ``ann_return``,
        ``sharpe_ex_best_month``, ``ann_return_ex_best_month``, ``sharpe_ex_best_3_months``,
        ``ann_return_ex_best_3_months``, ``sharpe_ci_low``, ``sharpe_ci_high``, ``psr``, ``dsr`` (or, for
        a sweep's job, ``dsr_provisional``),
        ``rank_ic_mean``, ``icir``, ``ndcg``, the ``index_*`` keys; a missing key shows as ``-``.
    leak_guard, feature_audit : the guard verdicts (``passed`` / ``failed`` / ``disabled``).
    not_comparable : why the run is not comparable (:func:`backtest.leakage.not_comparable_reasons`: the
        guards and the test days on which the book could trade); empty when it is.
    ndcg_depth : the depth of ``ndcg`` (the portfolio's ``top_k``), shown in its label.
    index : what the ``index_*`` metrics compare with (``IndexReturns.description``); None: no index table.
    run_name, run_id : the tracked run, named on the page.
    """

    metrics: Mapping[str, float] = field(default_factory=dict)
    leak_guard: str = "unknown"
    feature_audit: str = "unknown"
    not_comparable: tuple[str, ...] = ("its guard verdicts are unknown",)
    ndcg_depth: int = DEFAULT_TOP_K
    index: str | None = None
    run_name: str | None = None
    run_id: str | None = None

    @property
    def comparable(self) -> bool:
        return not self.not_comparable


def rolling_min_days(periods_per_year: int = PERIODS_PER_YEAR) -> int:
    """Fewest test days for which the tearsheet keeps quantstats' rolling charts: two of their 6-month
    windows (``2 * ceil(periods_per_year / 2)``), so that each curve spans at least half the period.

    >>> rolling_min_days(252)
    252
    """
    return 2 * math.ceil(periods_per_year / 2)


#: quantstats' figure blocks of the rolling charts, removed on tests shorter than :func:`rolling_min_days`.
ROLLING_CHARTS = ("rolling_beta", "rolling_vol", "rolling_sharpe", "rolling_sortino")


def write_tearsheet(
    returns: pd.Series,
    benchmark: pd.Series,
    path: Path | str,
    *,
    title: str = "Strategy tearsheet",
    periods_per_year: int = PERIODS_PER_YEAR,
    evidence: RunEvidence | None = None,
) -> Tearsheet:
    """Write the HTML tearsheet of daily strategy returns against the equal-weight benchmark.

    Parameters
    ----------
    returns : Series indexed by date, the strategy's daily returns (see ``backtest.reports.returns``).
    benchmark : Series on the same dates, the equal-weight benchmark's daily returns.
    path : the HTML file to write (its folder is created).
    title : report title (the run name); the page title and heading add the test period.
    periods_per_year : annualization (``backtest.statistics.PERIODS_PER_YEAR``).
    evidence : the run's robustness numbers and guard verdicts, shown first; None shows a note that
        the run's evidence was not given.

    Returns
    -------
    Tearsheet : the path and which renderer wrote it.

    Raises
    ------
    DataContractError : invalid or misaligned return series.
    """
    strategy, bench = check_daily_returns(returns, benchmark, where="tearsheet")
    assert bench is not None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    heading = page_heading(title, strategy.index)
    block = robustness_html(evidence, ndays=len(strategy), periods_per_year=periods_per_year)
    try:
        with _quiet_matplotlib():
            import quantstats as qs

            qs.reports.html(
                strategy,
                benchmark=bench,
                output=str(path),
                title=heading,
                periods_per_year=periods_per_year,
                match_dates=False,
                benchmark_title="Equal weight",
                strategy_title="Strategy",
            )
        page = path.read_text(encoding="utf-8")
        path.write_text(
            _with_evidence(page, heading, block, len(strategy) < rolling_min_days(periods_per_year)), encoding="utf-8"
        )
        return Tearsheet(path, "quantstats")
    except QUANTSTATS_BREAKAGE as exc:
        if not _raised_inside_quantstats(exc):
            raise
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "quantstats could not render the tearsheet (%s); writing the reduced tearsheet to %s instead",
            reason,
            path,
        )
    path.write_text(
        fallback_html(strategy, bench, title, periods_per_year, reason, evidence=evidence), encoding="utf-8"
    )
    return Tearsheet(path, "fallback", reason)


def _fmt(value: object, spec: str) -> str:
    return format_number(value, spec, "-")


def robustness_html(
    evidence: RunEvidence | None, *, ndays: int | None = None, periods_per_year: int = PERIODS_PER_YEAR
) -> str:
    """The robustness block that opens the tearsheet: a ``<section id="robustness">`` of two tables
    (Sharpe and annual return with and without the best months; interval, PSR, DSR, rank IC, NDCG), the
    guard verdicts and, with ``evidence.index``, the strategy against the index (:data:`INDEX_ROWS`), all
    read from ``evidence`` (never recomputed).

    Cells read ``<tr><td>label</td><td>value</td>...</tr>``; a missing or non-finite value is ``-``.
    """
    style = (
        "<style>#robustness{max-width:960px;margin:0 auto 30px auto;font:13px/1.4 sans-serif}"
        "#robustness table{width:auto;margin:0 30px 12px 0;border-collapse:collapse;display:inline-table;"
        "vertical-align:top}#robustness td,#robustness th{padding:3px 10px;border-bottom:1px solid #ddd;"
        "text-align:right}#robustness td:first-child,#robustness th:first-child{text-align:left}"
        "#robustness .pass{color:#1a7f37;font-weight:bold}#robustness .fail{color:#c62828;font-weight:bold}"
        "#robustness .warn{background:#fdecea;color:#c62828;padding:6px 10px;font-weight:bold}"
        "#robustness .note{color:#666}</style>"
    )
    if evidence is None:
        return (
            f"{style}<section id='robustness'><h2>Robustness</h2><p class='note'>The run's robustness "
            "metrics and guard verdicts were not given to this report.</p></section>"
        )
    m = evidence.metrics
    returns_rows = [
        ("full test period", "sharpe", "ann_return"),
        ("without the best month", "sharpe_ex_best_month", "ann_return_ex_best_month"),
        ("without the best 3 months", "sharpe_ex_best_3_months", "ann_return_ex_best_3_months"),
    ]
    first = "".join(
        f"<tr><td>{label}</td><td>{_fmt(m.get(sharpe), '.2f')}</td><td>{_fmt(m.get(ann), '.2%')}</td></tr>"
        for label, sharpe, ann in returns_rows
    )
    k = evidence.ndcg_depth
    interval = f"[{_fmt(m.get('sharpe_ci_low'), '.2f')}, {_fmt(m.get('sharpe_ci_high'), '.2f')}]"
    second = "".join(
        f"<tr><td>{label}</td><td>{value}</td></tr>"
        for label, value in [
            ("Sharpe 95% interval (block bootstrap)", interval),
            ("PSR (P[Sharpe &gt; 0])", _fmt(m.get("psr"), ".3f")),
            _dsr_row(m),
            ("rank IC (mean daily)", _fmt(m.get("rank_ic_mean"), "+.4f")),
            ("ICIR", _fmt(m.get("icir"), "+.3f")),
            (f"NDCG@{k}", _fmt(m.get("ndcg"), ".4f")),
        ]
    )
    guards = "".join(
        f"<tr><td>{label}</td><td class='{'pass' if ok else 'fail'}'>{html.escape(value)}</td></tr>"
        for label, value, ok in [
            ("leak guard", evidence.leak_guard, evidence.leak_guard == "passed"),
            ("feature audit", evidence.feature_audit, evidence.feature_audit == "passed"),
            ("comparable", "yes" if evidence.comparable else "NO", evidence.comparable),
        ]
    )
    index = ""
    if evidence.index is not None:
        cells = "".join(
            f"<tr><td>{label}</td><td>{_fmt(m.get(key), spec)}</td></tr>" for label, key, spec in INDEX_ROWS
        )
        index = (
            "<table><thead><tr><th>Against the index</th><th>value</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
            f"<p class='note'>Index: {html.escape(evidence.index)}, on the strategy's return days.</p>"
        )
    baselines = comparison_table(m)
    against = ""
    if len(baselines) > 1:
        cells = "".join(
            f"<tr><td>{html.escape(str(label))}</td><td>{_fmt(row['rank IC'], '+.4f')}</td>"
            f"<td>{_fmt(row['s.e.'], '.4f')}</td><td>{_fmt(row['Sharpe'], '.2f')}</td>"
            f"<td>{_fmt(row['Sharpe ex best month'], '.2f')}</td></tr>"
            for label, row in baselines.iterrows()
        )
        verdict = "<br>".join(html.escape(line) for line in baseline_verdicts(m))
        capture = f"; signal capture {_fmt(m['signal_capture'], '.1%')} of the oracle" if "signal_capture" in m else ""
        against = (
            "<table><thead><tr><th>Same folds and costs</th><th>rank IC</th><th>s.e.</th><th>Sharpe</th>"
            f"<th>ex best month</th></tr></thead><tbody>{cells}</tbody></table>"
            f"<p class='note'>{verdict}{capture}</p>"
        )
    warning = (
        ""
        if evidence.comparable
        else (
            f"<p class='warn'>Not comparable: {html.escape('; '.join(evidence.not_comparable))}. These numbers "
            "must not be compared with other runs.</p>"
        )
    )
    run = " ".join(
        html.escape(x)
        for x in (evidence.run_name and f"run {evidence.run_name}", evidence.run_id and f"(MLflow {evidence.run_id})")
        if x
    )
    rolling = ""
    if ndays is not None and ndays < rolling_min_days(periods_per_year):
        rolling = (
            f"<p class='note'>The rolling beta / volatility / Sharpe / Sortino charts are left out: the test "
            f"period has {ndays} trading days, fewer than the {rolling_min_days(periods_per_year)} (two "
            "6-month windows) they need.</p>"
        )
    return (
        f"{style}<section id='robustness'><h2>Robustness{': ' + run if run else ''}</h2>{warning}"
        "<table><thead><tr><th>Strategy</th><th>Sharpe</th><th>annual return</th></tr></thead>"
        f"<tbody>{first}</tbody></table>"
        f"<table><thead><tr><th>Evidence</th><th>value</th></tr></thead><tbody>{second}</tbody></table>"
        f"<table><thead><tr><th>Guards</th><th>verdict</th></tr></thead><tbody>{guards}</tbody></table>"
        f"{index}{against}{rolling}</section><hr>"
    )


#: The robustness block's index table: label, metric key (:data:`backtest.metrics.INDEX_KEYS`), format.
INDEX_ROWS: tuple[tuple[str, str, str], ...] = (
    ("excess annual return", "index_excess_ann_return", "+.2%"),
    ("beta", "index_beta", ".2f"),
    ("tracking error (annual)", "index_tracking_error", ".2%"),
    ("information ratio", "index_information_ratio", "+.2f"),
    ("index annual return", "index_ann_return", "+.2%"),
    ("index Sharpe", "index_sharpe", "+.2f"),
    ("index max drawdown", "index_max_drawdown", ".2%"),
)


def _dsr_row(m: Mapping[str, float]) -> tuple[str, str]:
    """A sweep's job has only ``dsr_provisional`` (the study-wide ``dsr`` is logged when the sweep ends)."""
    if "dsr" not in m and "dsr_provisional" in m:
        return "DSR, provisional (the study's DSR comes when the sweep ends)", _fmt(m["dsr_provisional"], ".3f")
    return "DSR (deflated for the study's trials)", _fmt(m.get("dsr"), ".3f")


def _with_evidence(page: str, heading: str, block: str, hide_rolling: bool) -> str:
    """quantstats' page with our title, the robustness block before its content, and without the
    rolling charts when ``hide_rolling``.

    The block goes before quantstats' ``<div id="left">`` (its charts; the metrics column follows them),
    else right after ``<body>``; the page title replaces quantstats' fixed one.
    """
    page = re.sub(
        r"<title>.*?</title>", lambda _: f"<title>{html.escape(heading)}</title>", page, count=1, flags=re.DOTALL
    )
    if hide_rolling:
        names = "|".join(ROLLING_CHARTS)
        page = re.sub(rf'\s*<div id="(?:{names})">.*?</div>', "", page, flags=re.DOTALL)
    marker = '<div id="left">'
    if marker in page:
        return page.replace(marker, block + marker, 1)
    body = re.search(r"<body[^>]*>", page)
    if body:
        return page[: body.end()] + block + page[body.end() :]
    return block + page


def tearsheet_metrics(
    returns: pd.Series,
    benchmark: pd.Series,
    periods_per_year: int = PERIODS_PER_YEAR,
    index: pd.Series | None = None,
) -> pd.DataFrame:
    """Headline statistics of the tearsheet, from :mod:`backtest.metrics` (which defines them as
    quantstats does: compounded, risk-free rate 0).

    Parameters
    ----------
    returns, benchmark : daily returns on the same dates (validated by the caller).
    periods_per_year : annualization.
    index : the index benchmark's daily returns on the same dates, optional (an ``Index`` column).

    Returns
    -------
    DataFrame indexed by metric name, columns ``Benchmark`` and ``Strategy`` (quantstats' order), then
    ``Index`` when ``index`` is given, float values: Cumulative Return, CAGR, Sharpe, Sortino, Volatility
    (ann.), Max Drawdown, Calmar (``CAGR / |Max Drawdown|``), Best Day, Worst Day, and the robustness rows
    Sharpe ex best month,
    CAGR ex best month, Sharpe ex best 3 months (the same with the best calendar month(s) removed,
    :func:`backtest.metrics.drop_best_months`). The run summary the CLI prints is this table too.
    """
    columns = {"Benchmark": benchmark, "Strategy": returns}
    if index is not None:
        columns["Index"] = index
    table = pd.DataFrame({name: _statistics(series, periods_per_year) for name, series in columns.items()})
    table.index.name = "Metric"
    return table


def _statistics(r: pd.Series, periods_per_year: int) -> dict[str, float]:
    cagr = metrics.ann_return(r, periods_per_year)
    max_drawdown = metrics.max_drawdown(r)
    return {
        "Cumulative Return": metrics.cum_return(r),
        "CAGR": cagr,
        "Sharpe": metrics.sharpe(r, periods_per_year),
        "Sortino": metrics.sortino(r, periods_per_year),
        "Volatility (ann.)": metrics.ann_vol(r, periods_per_year),
        "Max Drawdown": max_drawdown,
        "Calmar": cagr / abs(max_drawdown) if max_drawdown < 0 else float("nan"),
        "Best Day": float(r.max()),
        "Worst Day": float(r.min()),
        "Sharpe ex best month": metrics.sharpe(metrics.drop_best_months(r, 1), periods_per_year),
        "CAGR ex best month": metrics.ann_return(metrics.drop_best_months(r, 1), periods_per_year),
        "Sharpe ex best 3 months": metrics.sharpe(metrics.drop_best_months(r, 3), periods_per_year),
    }


#: Rows of :func:`tearsheet_metrics` that are fractions (shown as percents).
PERCENT_ROWS = (
    "Cumulative Return",
    "CAGR",
    "Volatility (ann.)",
    "Max Drawdown",
    "Best Day",
    "Worst Day",
    "CAGR ex best month",
)


def format_metric(name: str, value: float) -> str:
    """Format a tearsheet value as quantstats prints it: percents and ratios rounded to 2 decimals.

    >>> format_metric("CAGR", 0.12345), format_metric("Max Drawdown", -0.01), format_metric("Sharpe", 0.1008)
    ('12.35%', '-1.0%', '0.1')
    """
    if not np.isfinite(value):
        return "-"
    if name in PERCENT_ROWS:
        return f"{round(float(value) * 100, 2)}%"
    return str(round(float(value), 2))


def fallback_html(
    returns: pd.Series,
    benchmark: pd.Series,
    title: str,
    periods_per_year: int = PERIODS_PER_YEAR,
    reason: str | None = None,
    *,
    evidence: RunEvidence | None = None,
) -> str:
    """A self-contained HTML page: the robustness block (:func:`robustness_html`), then
    :func:`tearsheet_metrics` and the returns of each year.

    Rows read ``<tr><td>Sharpe</td><td>benchmark</td><td>strategy</td></tr>`` like quantstats' table.
    """
    table = tearsheet_metrics(returns, benchmark, periods_per_year)
    metric_rows = "\n".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(f"<td>{format_metric(name, row[col])}</td>" for col in ("Benchmark", "Strategy"))
        + "</tr>"
        for name, row in table.iterrows()
    )
    yearly = metrics.per_year_table(returns, benchmark)
    year_rows = "\n".join(
        f"<tr><td>{year}</td><td>{row['benchmark_return'] * 100:.2f}%</td><td>{row['return'] * 100:.2f}%</td></tr>"
        for year, row in yearly.iterrows()
    )
    note = f"<p class='note'>Reduced report: quantstats failed ({html.escape(reason)}).</p>" if reason else ""
    first, last = returns.index[0].date(), returns.index[-1].date()
    heading = html.escape(page_heading(title, returns.index))
    block = robustness_html(evidence)
    return f"""{page_head(page_heading(title, returns.index), "td:first-child{text-align:left}.note{color:#a60}")}
<h1>{heading}</h1><p>{first} - {last}, {len(returns)} trading days, benchmark: equal weight</p>
{block}
{note}
<h3>Key Performance Metrics</h3>
<table><thead><tr><th>Metric</th><th>Equal weight</th><th>Strategy</th></tr></thead><tbody>
{metric_rows}
</tbody></table>
<h3>Returns by Year</h3>
<table><thead><tr><th>Year</th><th>Equal weight</th><th>Strategy</th></tr></thead><tbody>
{year_rows}
</tbody></table></body></html>
"""


@contextlib.contextmanager
def _quiet_matplotlib() -> Iterator[None]:
    """Agg backend, rcParams restored afterwards, no font-manager noise, no quantstats warnings."""
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    font_logger = logging.getLogger("matplotlib.font_manager")
    level = font_logger.level
    font_logger.setLevel(logging.ERROR)
    import matplotlib.pyplot as plt

    open_figures = set(plt.get_fignums())
    try:
        with matplotlib.rc_context(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(quantstats|seaborn)(\..*)?$")
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"pandas(\..*)?$")
            yield
    finally:
        for number in set(plt.get_fignums()) - open_figures:  # figures left open by a failed plot
            plt.close(number)
        font_logger.setLevel(level)


def _raised_inside_quantstats(exc: BaseException) -> bool:
    """True when a frame of the exception's traceback is in the quantstats package."""
    import quantstats

    package_dir = str(Path(quantstats.__file__).resolve().parent)
    tb = exc.__traceback__
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(package_dir):
            return True
        tb = tb.tb_next
    return False

"""The study report of a sweep: its files, pages and charts."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backtest.comparison import BENCHMARK_COLUMN, build_study_report
from backtest.reports.study import STUDY_REPORT_FILES, trial_colors, write_study_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------
# Files


def test_write_study_report(tmp_path: Path, study) -> None:
    written = write_study_report(tmp_path / "study", study)
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values()) - {STUDY_REPORT_FILES["fold_rank_ic"]}
    assert all(p.parent == tmp_path / "study" and p.stat().st_size > 0 for p in written)

    page = (tmp_path / "study" / STUDY_REPORT_FILES["html"]).read_text(encoding="utf-8")
    assert "<h1>LR sweep</h1>" in page
    assert f"PBO = {study.pbo.pbo:.3f}" in page
    assert f"DSR = {study.trials.loc['better', 'dsr']:.3f}" in page
    for name in [*study.trial_names, BENCHMARK_COLUMN]:
        assert name in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    assert base64.b64decode(images[0]) == (tmp_path / "study" / STUDY_REPORT_FILES["equity"]).read_bytes()
    assert "n_combinations = 3,432" in page and "n_blocks = 14" in page
    assert "better than baseline (Sharpe, Holm p &lt; 0.001)" in page
    assert "slope near -1 is mechanical" in page and "complements" in page

    markdown = (tmp_path / "study" / STUDY_REPORT_FILES["markdown"]).read_text(encoding="utf-8")
    assert f"]({STUDY_REPORT_FILES['equity']})" in markdown and f"]({STUDY_REPORT_FILES['pbo_plot']})" in markdown
    assert "| trial | verdict | rank IC diff [95% CI] | p (Holm) | Sharpe diff [95% CI] | DSR |" in markdown
    # the comparison comes first, the configuration last
    assert markdown.index("## Comparison with the baseline") < markdown.index("## Equity curves")
    assert markdown.index("## Probability of backtest overfitting") < markdown.index("## Configuration")

    combos = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["pbo"])
    assert len(combos) == study.pbo.n_combinations
    np.testing.assert_allclose(combos["logit"], study.pbo.logits, rtol=1e-12)
    assert (combos["logit"] <= 0).mean() == study.pbo.pbo
    assert {"omega", "logit", "selected", "is_blocks"} <= set(combos.columns)
    trials = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["trials"], index_col="trial")
    np.testing.assert_allclose(trials["sharpe"], study.trials["sharpe"].astype(float), rtol=1e-12)
    years = pd.read_csv(tmp_path / "study" / STUDY_REPORT_FILES["years"], index_col=["year", "series"])
    assert years.loc[(2024, "better"), "return"] == pytest.approx(study.years.loc[(2024, "better"), "return"])
    for png in ("equity", "pbo_plot"):
        assert (tmp_path / "study" / STUDY_REPORT_FILES[png]).read_bytes().startswith(PNG_MAGIC)


def test_write_single_trial_report_without_pbo(tmp_path: Path, study_inputs) -> None:
    returns, benchmark, _ = study_inputs
    report = build_study_report(returns[["base"]], benchmark, title="alone", n_boot=50)
    written = write_study_report(tmp_path, report)
    not_written = {STUDY_REPORT_FILES["pbo_plot"], STUDY_REPORT_FILES["fold_rank_ic"]}  # no PBO, no folds given
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values()) - not_written
    page = (tmp_path / STUDY_REPORT_FILES["html"]).read_text(encoding="utf-8")
    assert "Not computed: PBO not computed: it needs at least 2 trials" in page
    assert page.count("data:image/png;base64,") == 1
    assert len(pd.read_csv(tmp_path / STUDY_REPORT_FILES["pbo"])) == 0


def test_trial_colours_are_fixed_by_position() -> None:
    colors = trial_colors(["a", "b", "c"])
    assert colors == {"a": "#1f77b4", "b": "#ff7f0e", "c": "#2ca02c", BENCHMARK_COLUMN: "#8c8c8c"}
    assert trial_colors([f"t{i}" for i in range(11)])["t10"] == "#1f77b4"  # tab10 cycles


def test_written_report_overlays_the_folds_and_shortens_the_configuration(tmp_path: Path, ranked) -> None:
    written = write_study_report(tmp_path, ranked)
    assert {p.name for p in written} == set(STUDY_REPORT_FILES.values())
    assert (tmp_path / STUDY_REPORT_FILES["fold_rank_ic"]).read_bytes().startswith(PNG_MAGIC)
    markdown = (tmp_path / STUDY_REPORT_FILES["markdown"]).read_text(encoding="utf-8")
    assert f"]({STUDY_REPORT_FILES['fold_rank_ic']})" in markdown
    summary = json.loads((tmp_path / STUDY_REPORT_FILES["summary"]).read_text(encoding="utf-8"))
    assert summary["primary"] == "rank_ic" and summary["verdict_statistic"]["old"] == "sharpe"
    edge = summary["comparisons"]["edge"]
    assert edge["rank_ic_diff"] == pytest.approx(ranked.trials.loc["edge", "rank_ic_diff"], rel=1e-12)
    assert edge["days_to_resolve"] is None and summary["comparisons"]["noise"]["days_to_resolve"] > 0
    trials = pd.read_csv(tmp_path / STUDY_REPORT_FILES["trials"], index_col="trial")
    assert list(trials.columns[:3]) == ["verdict", "verdict_statistic", "rank_ic_diff"]


def test_configuration_cells_are_short_and_last(tmp_path: Path, study_inputs) -> None:
    returns, benchmark, trial_metrics = study_inputs
    features = json.dumps([f"feature_{i}" for i in range(40)])
    report = build_study_report(
        returns,
        benchmark,
        title="wide",
        trial_metrics=trial_metrics.assign(**{"features.exclude": [features, "[]", "[]", "[]"]}),
        n_boot=50,
    )
    write_study_report(tmp_path, report)
    markdown = (tmp_path / STUDY_REPORT_FILES["markdown"]).read_text(encoding="utf-8")
    configuration = markdown[markdown.index("## Configuration") :]
    assert "40 items: feature_0, feature_1" in configuration and "feature_39" not in configuration
    assert "| trial | params.model.lr | features.exclude |" in configuration
    trials = pd.read_csv(tmp_path / STUDY_REPORT_FILES["trials"], index_col="trial")
    assert trials.loc["base", "features.exclude"] == features  # the CSV keeps the full value
    assert list(trials.columns[-2:]) == ["params.model.lr", "features.exclude"]


def _markdown_rows(markdown: str, heading: str) -> list[dict[str, str]]:
    lines = [line for line in markdown.split(f"## {heading}")[1].split("\n## ")[0].splitlines() if line.startswith("|")]
    names = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(names, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_the_trials_tables_put_core_columns_first_three_decimals_and_keep_names_in_view(tmp_path: Path, study) -> None:
    write_study_report(tmp_path, study)
    markdown = (tmp_path / STUDY_REPORT_FILES["markdown"]).read_text(encoding="utf-8")
    trials = _markdown_rows(markdown, "Trials")
    core = ["trial", "Sharpe [95% CI]", "ex best month", "rank IC (s.e.)", "DSR"]  # then comparable, when tagged
    assert list(trials[0])[:5] == core and list(trials[0])[5:7] == ["ann. return", "max DD"]
    three = re.compile(r"^[+-]?\d+\.\d{3}$")
    for row in trials:
        sharpe, low, high = re.match(r"^(\S+) \[(\S+), (\S+)\]$", row["Sharpe [95% CI]"]).groups()
        ic_and_se = re.findall(r"[+-]?\d+\.\d+", row["rank IC (s.e.)"])  # the s.e. when the run has one
        cells = [sharpe, low, high, *ic_and_se, row["ex best month"], row["DSR"], row["NDCG"], row["PSR"]]
        assert all(three.match(cell) for cell in cells), row
    better = study.trials.loc["better"]
    assert next(r for r in trials if r["trial"] == "better")["DSR"] == f"{better['dsr']:.3f}"
    compared = [r for r in _markdown_rows(markdown, "Comparison with the baseline") if r["trial"] == "better"][0]
    assert re.match(r"^[+-]\d+\.\d{3} \[[+-]\d+\.\d{3}, [+-]\d+\.\d{3}\]$", compared["Sharpe diff [95% CI]"])
    years = _markdown_rows(markdown, "Sharpe ratio per calendar year")
    assert all(three.match(cell) for row in years for name, cell in row.items() if name != "year" and cell)

    page = (tmp_path / STUDY_REPORT_FILES["html"]).read_text(encoding="utf-8")
    trials_html = page.split("<h2>Trials</h2>")[1].split("<h2>")[0]
    assert "<div class='wide'>" in trials_html  # a wide table scrolls sideways in its box...
    assert (
        "position: sticky" in trials_html and 'class="row_heading level0 row0" >' in trials_html
    )  # ...under its names
    assert ".wide td,.wide th{white-space:nowrap}" in page  # an interval stays on one line

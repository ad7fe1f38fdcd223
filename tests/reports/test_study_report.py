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

"""The research log's claim table (backtest/research_log.py): one row per claim, from the study reports."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from backtest.reports.files import STUDY_REPORT_FILES
from backtest.research_log import CLAIM_COLUMNS, RESEARCH_LOG, claim_table
from backtest.study import digest


def _report(folder: Path, baseline: str, rows: dict[str, dict[str, object]]) -> None:
    folder.mkdir()
    summary = {"baseline": baseline, "n_days": 480, "start": "2024-01-03", "end": "2025-12-30", "n_trials": 2}
    (folder / STUDY_REPORT_FILES["summary"]).write_text(json.dumps({**summary, "pbo": None, "pbo_blocks": None}))
    columns = {"sharpe": 1.0, "sharpe_ci_low": -0.5, "sharpe_ci_high": 2.5, "sharpe_ex_best_month": 0.8}
    columns.update(ann_return=0.1, rank_ic_mean=0.04, dsr=0.9)  # what the per-trial table shows
    frame = pd.DataFrame.from_dict({name: {**columns, **row} for name, row in rows.items()}, orient="index")
    frame.index.name = "trial"
    frame.to_csv(folder / STUDY_REPORT_FILES["trials"])


def _cells(text: str, item: str) -> list[str]:
    line = next(r for r in text.splitlines() if r.startswith(f"| {item} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_each_claim_gets_its_verdict_effect_power_and_the_planted_truth(tmp_path: Path) -> None:
    base = {"sharpe": 1.0, "verdict": "baseline", "verdict_statistic": "rank_ic"}
    mf = {
        "verdict": "worse than baseline (rank IC, Holm p < 0.001)",
        "verdict_statistic": "rank_ic",
        "rank_ic_diff": -0.0176,
        "rank_ic_diff_se": 0.0042,
        "mde_rank_ic": 0.0118,
        "n_seeds": 3,
    }
    _report(tmp_path / "moneyflow", "features=all", {"features=all": base, "features=no_moneyflow": mf})
    vol = {**mf, "verdict": "better than baseline (rank IC, Holm p = 0.030)", "rank_ic_diff": 0.0064}
    _report(tmp_path / "volatility", "features=all", {"features=all": base, "features=no_volatility": vol})
    top = {**mf, "verdict": "no detectable difference (rank IC, Holm p = 0.400)", "rank_ic_diff": -0.001}
    _report(tmp_path / "top80", "features=all", {"features=all": base, "features=top80_by_gain": top})
    text = claim_table(tmp_path)
    assert len(text.splitlines()) == 2 + 3  # header, rule, one row per study present
    cells = _cells(text, "(c)")
    assert len(cells) == len(CLAIM_COLUMNS) and cells[1] == RESEARCH_LOG["moneyflow"].claim
    assert cells[3] == "features=no_moneyflow vs features=all" and cells[4] == "worse than baseline (rank ic)"
    assert cells[5] == "-0.0176 ± 0.0042" and cells[6] == "0.0118" and cells[7] == "3" and cells[9] == "yes"
    assert _cells(text, "(b)")[9] == "yes"  # better without volatility: not worse, as planted
    assert _cells(text, "(d)")[9] == "not planted"
    # the digest opens with the claims, then every trial
    whole = digest(tmp_path)
    assert whole.index("## The research log's claims") < whole.index("## Every trial")
    assert "| moneyflow | features=no_moneyflow |" in whole


def test_a_verdict_against_the_planted_truth_is_marked(tmp_path: Path) -> None:
    base = {"verdict": "baseline", "verdict_statistic": "sharpe"}
    old = {"verdict": "no detectable difference (interval spans 0)", "diff_vs_baseline": -0.19}  # Sharpe only
    _report(tmp_path / "moneyflow", "features=all", {"features=all": base, "features=no_moneyflow": old})
    cells = _cells(claim_table(tmp_path), "(c)")
    assert cells[4] == "no detectable difference (sharpe)" and cells[5] == "-0.19" and cells[9] == "no"

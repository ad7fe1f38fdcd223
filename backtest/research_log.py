"""The research log's claims, and what the committed studies say of each: the head of ``experiments/digest.md``.

Each claim of the research log that motivated the framework (real CSI 300 data, its own period) is
reproduced by one study of ``conf/study/`` on the synthetic market: one trial against the study's
baseline. :data:`RESEARCH_LOG` holds the claim, the log's Sharpe, the trial that tests it and, where the
market plants something about it, what the planted truth says the trial's ranking should do against the
baseline. :func:`claim_table` reads each study's report (``study_trials.csv``) and gives one row per claim:
the verdict and the statistic it rests on, the effect with its standard error, the minimum detectable
difference, the seeds, and whether the planted truth agrees.

The truths are about the ranking the model can make (its daily rank IC), not about Sharpe:

- ``better``: the trial must rank better (the leak: a fit without the purge sees its test labels);
- ``worse``: it must rank worse (without money flow, the informed flow the market plants is unseen);
- ``not worse``: removing noise or adding a planted signal cannot hurt what the market rewards, so
  ``worse`` disagrees and ``better`` or no detectable difference agree;
- ``""``: the market plants nothing about it (feature selection, label coarseness, the architecture).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from backtest.reports.files import STUDY_REPORT_FILES


@dataclass(frozen=True)
class LogClaim:
    """One claim of the research log and the trial of its study that tests it (see the module docstring)."""

    item: str
    claim: str
    log_sharpe: str
    trial: str
    truth: str
    truth_why: str


RESEARCH_LOG: dict[str, LogClaim] = {
    "leak": LogClaim(
        "(a)",
        "the label leak made the backtest look excellent",
        "good before the fix, -0.49 after",
        "backtest.purge=False",
        "better",
        "labels overlap by 4 days (+0.77 autocorrelation): a fit without the purge sees its test labels",
    ),
    "volatility": LogClaim(
        "(b)",
        "cutting the volatility features helped",
        "-0.49 -> +0.40",
        "features=no_volatility",
        "not worse",
        "volatility never enters expected returns",
    ),
    "moneyflow": LogClaim(
        "(c)",
        "money flow brought real gains",
        "+0.70 with it",
        "features=no_moneyflow",
        "worse",
        "informed flow moves the next day's return and shows in the money-flow data",
    ),
    "top80": LogClaim(
        "(d)",
        "top-80 feature selection made it worse",
        "+0.70 -> -0.07",
        "features=top80_by_gain",
        "",
        "not planted",
    ),
    "labels": LogClaim(
        "(e)",
        "three-class labels made it worse",
        "+0.70 -> -1.08",
        "label=three_class",
        "",
        "not planted",
    ),
    "industry": LogClaim(
        "(f)",
        "filling the industry data made it worse",
        "+0.70 -> +0.18",
        "features=with_industry",
        "not worse",
        "an industry tilt that flips with the regime is planted",
    ),
    "transformer": LogClaim(
        "(g)",
        "a StockTransformer with cross-stock attention ranks the universe",
        "not reported",
        "model=stock_transformer",
        "",
        "not planted",
    ),
}

#: The claim table's columns.
CLAIM_COLUMNS = (
    "log item",
    "the log's claim",
    "log's Sharpe (real data)",
    "trial vs baseline",
    "our verdict (statistic)",
    "effect ± s.e.",
    "MDE",
    "seeds",
    "planted truth",
    "agrees",
)


def _direction(verdict: str) -> str:
    """``better``, ``worse`` or ``none`` of a study report's verdict text."""
    if verdict.startswith("better"):
        return "better"
    if verdict.startswith("worse"):
        return "worse"
    return "none"


def agreement(truth: str, verdict: str) -> str:
    """Whether a verdict agrees with the planted truth (module docstring).

    >>> agreement("worse", "worse than baseline (rank IC, Holm p < 0.001)")
    'yes'
    >>> agreement("not worse", "no detectable difference (rank IC, Holm p = 0.41)")
    'yes'
    >>> agreement("better", "no detectable difference (rank IC, Holm p = 0.20)")
    'no'
    >>> agreement("", "worse than baseline (Sharpe, Holm p = 0.01)")
    'not planted'
    """
    if not truth:
        return "not planted"
    found = _direction(verdict)
    if truth == "not worse":
        return "yes" if found != "worse" else "no"
    return "yes" if found == truth else "no"


def claim_table(directory: Path | str) -> str:
    """One markdown row per claim of :data:`RESEARCH_LOG` whose study report is under ``directory``."""
    directory = Path(directory)
    lines = ["| " + " | ".join(CLAIM_COLUMNS) + " |", "|---" * len(CLAIM_COLUMNS) + "|"]
    for study, claim in RESEARCH_LOG.items():
        trials_file = directory / study / STUDY_REPORT_FILES["trials"]
        if not trials_file.is_file():
            continue
        trials = pd.read_csv(trials_file, index_col=0)
        summary = json.loads((directory / study / STUDY_REPORT_FILES["summary"]).read_text())
        if claim.trial not in trials.index:
            continue
        row = trials.loc[claim.trial]
        verdict = str(row.get("verdict", ""))
        statistic = str(row["verdict_statistic"]) if pd.notna(row.get("verdict_statistic")) else "sharpe"
        effect = row.get(f"{statistic}_diff", row.get("diff_vs_baseline"))
        se = row.get(f"{statistic}_diff_se")
        digits = "+.2f" if statistic == "sharpe" else "+.4f"
        effect_text = format(float(effect), digits) if pd.notna(effect) else ""
        if pd.notna(se):
            effect_text += f" ± {float(se):.{2 if statistic == 'sharpe' else 4}f}"
        mde = row.get("mde_rank_ic")
        seeds = row.get("n_seeds")
        cells = [
            claim.item,
            claim.claim,
            claim.log_sharpe,
            f"{claim.trial} vs {summary['baseline']}",
            f"{verdict.split(' (')[0]} ({statistic.replace('_', ' ')})",
            effect_text,
            f"{float(mde):.4f}" if pd.notna(mde) else "",
            f"{int(seeds)}" if pd.notna(seeds) else "1",
            f"{claim.truth or '-'}: {claim.truth_why}",
            agreement(claim.truth, verdict),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

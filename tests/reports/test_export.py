"""A recorded run's artifacts as alphalens' factor_data and Qlib's pred / label: alphalens' own numbers on the
exported frame are the run's."""

from __future__ import annotations

import warnings

import alphalens  # alphalens-reloaded, a dev dependency (pyproject.toml)
import numpy as np
import pandas as pd
import pytest

from backtest.errors import DataContractError
from backtest.labels import LabelSpec
from backtest.metrics import daily_ic, rank_autocorrelation, rank_ic_by_group, score_quantiles
from backtest.reports.export import alphalens_factor_data, qlib_frames


def test_alphalens_information_coefficient_is_the_runs_daily_rank_ic(recorded_run) -> None:
    factor_data = alphalens_factor_data(recorded_run.artifacts, horizons=(5,))
    assert list(factor_data.columns) == ["4D", "factor", "group", "factor_quantile"]  # the 5-day label: held 4 days
    assert factor_data.index.names == ["date", "asset"]
    ic = alphalens.performance.factor_information_coefficient(factor_data)["4D"].dropna()
    ours = recorded_run.result.daily_ranking["rank_ic"].dropna()
    # days whose score quantiles cannot be cut (ties spanning a decile edge) are left out, as alphalens does
    assert set(ic.index) <= set(ours.index) and 0.9 * len(ours) <= len(ic) <= len(ours)
    gap = (ic - ours.reindex(ic.index)).abs()
    assert gap.max() < 1e-12, gap.max()
    assert abs(ic.mean() - ours[ours.index.isin(ic.index)].mean()) < 1e-12


def test_every_horizon_and_the_groups_give_alphalens_our_numbers(recorded_run) -> None:
    factor_data = alphalens_factor_data(recorded_run.artifacts)
    assert list(factor_data.columns) == ["1D", "4D", "9D", "19D", "factor", "group", "factor_quantile"]
    factor = factor_data["factor"]
    ic = alphalens.performance.factor_information_coefficient(factor_data)
    for period in ("1D", "4D", "9D", "19D"):
        ours = daily_ic(factor, factor_data[period], "spearman")
        assert (ic[period] - ours).abs().max() < 1e-12
    with warnings.catch_warnings():  # scipy warns on a constant group-day (its Spearman is NaN, as ours)
        warnings.simplefilter("ignore")
        by_group = alphalens.performance.mean_information_coefficient(factor_data, by_group=True)["4D"]
    ours = rank_ic_by_group(factor, factor_data["4D"], factor_data["group"], 5)["rank_ic_mean"]
    assert (by_group - ours.reindex(by_group.index)).abs().max() < 1e-12
    # lags count the run's trading days (alphalens' calendar of the factor's dates), not the rows left
    autocorrelation = alphalens.performance.factor_rank_autocorrelation(factor_data, 1)
    days = recorded_run.result.scores.index.get_level_values(0).unique()
    assert abs(autocorrelation.mean() - rank_autocorrelation(factor, (1,), days=days)[1]) < 1e-12


def test_factor_quantiles_are_those_alphalens_cuts(recorded_run, capsys) -> None:
    factor_data = alphalens_factor_data(recorded_run.artifacts, horizons=(2, 5))
    clean = alphalens.utils.get_clean_factor(
        factor_data["factor"],
        factor_data[["1D", "4D"]],
        groupby=factor_data["group"],
        quantiles=10,
        max_loss=1.0,
    )
    assert clean.index.equals(factor_data.index)
    np.testing.assert_array_equal(clean["factor_quantile"].to_numpy(), factor_data["factor_quantile"].to_numpy())
    # and the same cut on a day with a tie across an edge: pandas.qcut refuses it, so do we
    day = pd.MultiIndex.from_product([[pd.Timestamp("2024-01-02")], list("abcdefgh")])
    tied = pd.Series([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 3.0], index=day)
    with pytest.raises(ValueError, match="Bin edges must be unique"):
        pd.qcut(tied, 4)
    assert score_quantiles(tied, 4).isna().all()


def test_qlib_pred_and_label_give_qlibs_rank_ic_the_runs_value(recorded_run) -> None:
    pred, label = qlib_frames(recorded_run.artifacts)
    assert pred.index.names == ["datetime", "instrument"] and list(pred.columns) == ["score"]
    assert list(label.columns) == ["label"] and label["label"].notna().all()
    assert pred.index.get_level_values("instrument").str.match(r"^(SH|SZ|BJ)\d{6}$").all()
    # Qlib's calc_ic: pandas' Spearman correlation of pred and label per datetime
    both = pd.concat([pred["score"], label["label"]], axis=1, join="inner")
    ric = both.groupby(level="datetime").apply(lambda day: day["score"].corr(day["label"], method="spearman"))
    ours = recorded_run.result.daily_ranking["rank_ic"]
    assert ric.index.equals(ours.dropna().index)
    assert (ric - ours.reindex(ric.index)).abs().max() < 1e-12


def test_a_folder_without_forward_returns_is_refused_with_the_fix(tmp_path, recorded_run) -> None:
    with pytest.raises(DataContractError, match="missing .*forward_returns.parquet. Fix: pass mlartifacts/"):
        alphalens_factor_data(tmp_path)
    with pytest.raises(DataContractError, match=r"not \[3\]. Fix: horizons=\(2, 5, 10, 20\)"):
        alphalens_factor_data(recorded_run.artifacts, horizons=(3,))
    with pytest.raises(DataContractError, match="no fwd_ret_7d"):
        qlib_frames(recorded_run.artifacts, label=LabelSpec(exit_offset=7))

"""The indicator registry: contents, declarations, immutability."""

from __future__ import annotations

import numpy as np
import pytest

from backtest.data.schema import KNOWN_COLUMNS
from backtest.errors import ConfigError
from backtest.features import FeatureRegistry, Indicator, default_registry, describe_indicators
from backtest.features.registry import GROUPS

REQUIRED = [
    *(f"ret_{n}d" for n in (1, 3, 5, 10, 20, 60)),
    "ma_ratio_5",
    "ma_ratio_20",
    "rsi_6",
    "rsi_14",
    "kdj_k",
    "kdj_d",
    "kdj_j",
    "macd_dif",
    "macd_dea",
    "macd_hist",
    "cci_14",
    "wr_14",
    "roc_12",
    "vol_5d",
    "vol_10d",
    "vol_20d",
    "atr_pct",
    "boll_pctb",
    "boll_width",
    "hl_range",
    "volume_ratio_5",
    "amount_ratio_5",
    "turnover",
    "turnover_ratio_20",
    "price_pos_20",
    "price_pos_60",
    "mf_main_net_rate",
    "mf_small_net_rate",
    "mf_elg_share",
    "industry_id",
    "ind_rel_ret_5",
    "log_mv",
]


def test_default_registry_has_the_required_indicators_and_at_least_72():
    reg = default_registry()
    assert len(reg) >= 72
    assert [n for n in REQUIRED if n not in reg] == []


def test_every_indicator_is_declared():
    for ind in default_registry():
        assert ind.group in GROUPS
        assert ind.lookback >= 0 and ind.inputs and ind.description, ind.name
        assert set(ind.inputs) <= set(KNOWN_COLUMNS), ind.name


def test_money_flow_names_get_time_aggregates_by_default():
    reg = default_registry()
    for name in ("mf_main_net_rate", "mf_small_net_rate", "mf_elg_share"):
        assert reg.get(name).aggregate
    assert not reg.get("industry_id").cross_sectional


def test_lookback_is_where_values_start(panel):
    """On a stock with a full history, an indicator's first value sits at row `lookback` (activity
    averages, which need only half their window of traded days, may start earlier)."""
    from backtest.data.panel import WideGrid
    from backtest.features.inputs import MarketData

    market = MarketData(panel, WideGrid.of(panel))
    stock = 0  # listed from day 0, never suspended
    for ind in default_registry():
        if ind.group in ("industry", "size"):
            continue
        with np.errstate(all="ignore"):
            column = np.asarray(ind.compute(market))[:, stock]
        first = int(np.argmax(np.isfinite(column)))
        activity = bool({"volume", "amount"} & set(ind.inputs))
        assert first <= ind.lookback if activity else first == ind.lookback, (
            f"{ind.name}: first value at row {first}, declared lookback {ind.lookback}"
        )


def test_extended_returns_a_new_registry_and_rejects_duplicates():
    reg = default_registry()
    extra = Indicator("my_feature", lambda m: m.close, ("close",), 0, "momentum", "close")
    bigger = reg.extended(extra)
    assert "my_feature" in bigger and "my_feature" not in reg
    with pytest.raises(ConfigError, match="duplicate"):
        bigger.extended(extra)


@pytest.mark.parametrize("name", ["Bad", "x_cs_rank", "x_ma5", "x_cs_z", "1x"])
def test_indicator_names_that_would_collide_with_transforms_are_refused(name):
    with pytest.raises(ConfigError, match="invalid"):
        Indicator(name, lambda m: m.close, ("close",), 0, "momentum", "d")


def test_unknown_name_suggests_close_matches():
    with pytest.raises(ConfigError, match="did you mean rsi_14"):
        default_registry().get("rsi14")


def test_registry_fingerprint_changes_with_contents():
    reg = default_registry()
    assert reg.fingerprint() == default_registry().fingerprint()
    extra = Indicator("my_feature", lambda m: m.close, ("close",), 0, "momentum", "close")
    assert reg.extended(extra).fingerprint() != reg.fingerprint()


def test_describe_indicators_lists_every_indicator():
    table = describe_indicators()
    assert list(table.index) == default_registry().names
    assert table.loc["rsi_14", "lookback"] == 14 and table.loc["rsi_14", "inputs"] == "close"
    assert len(FeatureRegistry(())) == 0


def test_intermediates_dropped_from_the_memo_come_back_bit_identical(panel, monkeypatch):
    """MarketData keeps the MEMO_ENTRIES most recently used intermediates; with room for one, every
    shared input is derived again many times, and the matrix is the same bit for bit."""
    import backtest.features.inputs as inputs
    from backtest.features.build import compute_features
    from backtest.features.sets import plan_features
    from tests.features.feature_fixtures import EVERYTHING

    plan = plan_features(EVERYTHING, default_registry(), panel.columns)
    made: list[str] = []
    derive = inputs.MarketData.derived

    def counted(self, key, make):
        def traced():
            made.append(key)
            return make()

        out = derive(self, key, traced)
        assert len(self._memo) <= inputs.MEMO_ENTRIES
        return out

    monkeypatch.setattr(inputs.MarketData, "derived", counted)
    default, _ = compute_features(panel, plan, rows="all")
    keys = len(set(made))
    assert len(made) - keys <= 8  # the default keeps nearly everything it uses again (4 of 51 here)
    made.clear()
    monkeypatch.setattr(inputs, "MEMO_ENTRIES", 1)
    tight, _ = compute_features(panel, plan, rows="all")
    assert len(made) > 10 * keys  # derived again and again
    assert default.tobytes() == tight.tobytes()

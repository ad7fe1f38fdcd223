"""Feature sets: the Hydra configs, exclusions, missing inputs, top-k selection, the matrix API."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hydra.utils import instantiate

from backtest.errors import ConfigError
from backtest.features import FeatureSetSpec, build_features, default_registry, plan_features, select_by_gain
from backtest.features.sets import INDUSTRY_INDICATORS

SETS = ("all", "no_volatility", "no_moneyflow", "with_industry", "price_only", "top80_by_gain")
VOLATILITY = ("vol_5d", "vol_10d", "vol_20d", "boll_pctb", "boll_width", "atr_pct")


@pytest.fixture(scope="module")
def specs(compose_config) -> dict[str, FeatureSetSpec]:
    def load_set(name: str) -> FeatureSetSpec:
        cfg = compose_config([f"+features={name}"], config_name=None)  # independent of config.yaml
        return instantiate(cfg.features, _convert_="all")

    return {name: load_set(name) for name in SETS}


@pytest.fixture(scope="module")
def full_columns(panel):
    return list(panel.columns)


def names_of(spec, columns):
    return plan_features(spec, default_registry(), columns).names


def test_every_config_instantiates_a_spec_named_after_its_file(specs):
    for name, spec in specs.items():
        assert isinstance(spec, FeatureSetSpec) and spec.name == name
    assert specs["all"] == FeatureSetSpec()  # the yaml and the dataclass defaults agree


def test_column_counts_of_the_named_sets(specs, full_columns):
    counts = {name: len(names_of(spec, full_columns)) for name, spec in specs.items()}
    # all: 75 indicators x (raw, rank, z) + 10 aggregated x 2 windows x 3
    assert counts == {
        "all": 285,
        "no_volatility": 255,
        "no_moneyflow": 243,
        "with_industry": 292,
        "price_only": 120,
        "top80_by_gain": 285,
    }
    assert 250 <= counts["all"] <= 300


def test_no_volatility_drops_the_six_and_everything_derived(specs, full_columns):
    names = names_of(specs["no_volatility"], full_columns)
    every = names_of(specs["all"], full_columns)
    dropped = sorted(set(every) - set(names))
    assert all(n.startswith(VOLATILITY) for n in dropped)
    assert not [n for n in names if n.startswith(VOLATILITY)]
    assert {"atr_pct_ma20_cs_rank", "boll_pctb_ma5", "vol_20d_cs_z"} <= set(dropped)


def test_all_leaves_industry_out_and_with_industry_brings_it(specs, full_columns):
    every = names_of(specs["all"], full_columns)
    assert not [n for n in every if n.startswith(INDUSTRY_INDICATORS)]
    industry = names_of(specs["with_industry"], full_columns)
    assert "industry_id" in industry and "industry_id_cs_rank" not in industry  # a label, not ranked
    assert {"ind_rel_ret_5_cs_rank", "ind_rel_ret_20"} <= set(industry)


def test_money_flow_columns_of_the_research_log_exist(specs, full_columns):
    every = set(names_of(specs["all"], full_columns))
    for base in ("mf_main_net_rate", "mf_small_net_rate", "mf_elg_share"):
        assert {base, f"{base}_ma5", f"{base}_ma20", f"{base}_ma20_cs_rank"} <= every
    assert not [n for n in names_of(specs["no_moneyflow"], full_columns) if n.startswith("mf_")]


def test_top80_by_gain_selects_from_all(specs):
    spec = specs["top80_by_gain"]
    assert spec.keep_by_gain == 80 and spec.base_set == "all"
    assert spec.exclude == specs["all"].exclude


def test_price_only_runs_on_a_close_only_panel(specs, panel, caplog):
    close_only = panel[["close"]]
    with caplog.at_level(logging.WARNING, logger="backtest.features"):
        matrix = build_features(close_only, specs["price_only"], data_fingerprint="close")
    assert not caplog.records  # nothing dropped: every price_only indicator needs close only
    assert matrix.shape == (len(panel), 120)  # no in_universe: every row is eligible
    assert not np.isnan(matrix.values).all(axis=0).any()  # no empty column


def test_missing_inputs_are_dropped_with_one_log_line(specs, panel, caplog):
    partial = panel.drop(columns=["buy_sm_amount", "sell_sm_amount", "float_mv", "industry"])
    with caplog.at_level(logging.WARNING, logger="backtest.features"):
        matrix = build_features(partial, FeatureSetSpec(exclude=(), industry_neutral=True), data_fingerprint="p")
    records = [r for r in caplog.records if r.name == "backtest.features"]
    assert len(records) == 1
    message = records[0].getMessage()
    for name in ("mf_small_net_rate", "turnover", "turnover_ratio_5", "log_float_mv", "industry_id", "ind_rel_ret_5"):
        assert name in message
    assert "industry neutralisation" in message
    assert "mf_small_net_rate" not in matrix.names and "mf_main_net_rate" in matrix.names
    assert not [n for n in matrix.names if n.endswith("_ind_neu")]


def test_unknown_names_and_bad_values_are_config_errors():
    reg = default_registry()
    with pytest.raises(ConfigError, match="did you mean vol_20d"):
        plan_features(FeatureSetSpec(exclude=("vol_20",)), reg, ["close"])
    with pytest.raises(ConfigError, match="windows"):
        FeatureSetSpec(windows=(1, 5))
    with pytest.raises(ConfigError, match="keep_by_gain"):
        FeatureSetSpec(keep_by_gain=0)
    with pytest.raises(ConfigError, match="must be a list"):
        FeatureSetSpec(exclude="vol_20d")
    with pytest.raises(ConfigError, match="no feature columns"):
        plan_features(FeatureSetSpec(indicators=("turnover",)), reg, ["close"])


def test_select_by_gain_orders_by_gain_then_name():
    importance = {"b": 3.0, "a": 1.0, "c": 3.0, "d": 0.0, "e": 2.5}
    assert select_by_gain(importance, 3) == ["b", "c", "e"]
    assert select_by_gain(importance, 10) == ["b", "c", "e", "a", "d"]
    with pytest.raises(ConfigError):
        select_by_gain(importance, 0)
    with pytest.raises(ConfigError):
        select_by_gain({"a": float("nan")}, 1)


def test_matrix_select_and_cube(tiny_panel):
    spec = FeatureSetSpec(indicators=("ret_1d", "ret_5d", "log_mv"), cs_z=False)
    matrix = build_features(tiny_panel, spec, data_fingerprint="tiny")
    assert matrix.values.dtype == np.float32 and matrix.values.flags.c_contiguous
    chosen = matrix.select(["log_mv", "ret_1d"])
    assert chosen.names == ["ret_1d", "log_mv"]  # the matrix's column order
    np.testing.assert_array_equal(chosen.values[:, 1], matrix.column("log_mv"))
    assert chosen.fingerprint != matrix.fingerprint
    with pytest.raises(ConfigError, match="unknown feature"):
        matrix.select(["nope"])
    cube = matrix.cube(["ret_5d_cs_rank", "ret_1d"])
    assert cube.values.shape == (len(cube.dates), len(cube.codes), 2)
    frame = matrix.to_frame()
    date, code = frame.index[1234]
    i, j = cube.dates.get_loc(date), cube.codes.get_loc(code)
    assert cube.present[i, j] and cube.values[i, j, 1] == frame.loc[(date, code), "ret_1d"]
    assert cube.present.sum() == len(frame) and np.isnan(cube.values[~cube.present]).all()


def test_fingerprint_depends_on_data_spec_and_rows(tiny_panel):
    spec = FeatureSetSpec(indicators=("ret_1d",))
    a = build_features(tiny_panel, spec, data_fingerprint="d1").fingerprint
    assert a == build_features(tiny_panel, spec, data_fingerprint="d1").fingerprint
    assert a != build_features(tiny_panel, spec, data_fingerprint="d2").fingerprint
    assert (
        a
        != build_features(
            tiny_panel, FeatureSetSpec(indicators=("ret_1d",), cs_z=False), data_fingerprint="d1"
        ).fingerprint
    )
    assert a != build_features(tiny_panel, spec, data_fingerprint="d1", rows="all").fingerprint

"""RankingData: validation, grouping, selection; window_view: the [day, stock, window, feature] view."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from backtest.errors import ConfigError, DataContractError
from models.base import Ranker, check_label_processing
from models.data import RankingData
from models.lambdarank import LambdaRankRanker
from models.transformer_ranker import StockTransformerRanker
from models.windows import feature_tensor, window_view

D = np.array(["2024-01-02", "2024-01-02", "2024-01-03", "2024-01-03", "2024-01-03"], dtype="datetime64[ns]")
C = np.array(["A", "B", "A", "B", "C"])


def small(**kw: object) -> RankingData:
    args = dict(X=np.arange(10, dtype=np.float64).reshape(5, 2), dates=D, codes=C, feature_names=("f", "g"))
    args.update(kw)
    return RankingData(**args)  # type: ignore[arg-type]


def test_groups_are_days_in_order() -> None:
    data = small(relevance=np.array([1, 0, 2, 0, 1]))
    assert data.X.dtype == np.float32
    np.testing.assert_array_equal(data.group_sizes(), [2, 3])
    np.testing.assert_array_equal(data.day_starts(), [0, 2, 5])
    np.testing.assert_array_equal(data.day_index(), [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(data.day_slots(), [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(data.days(), D[[0, 2]])
    matrix, mask = data.day_matrix(data.relevance, fill=-1)
    np.testing.assert_array_equal(matrix, [[1, 0, -1], [2, 0, 1]])
    np.testing.assert_array_equal(mask, [[True, True, False], [True, True, True]])


@pytest.mark.parametrize(
    "dates, codes, match",
    [
        (D[[2, 3, 4, 0, 1]], C[[2, 3, 4, 0, 1]], "sorted by \\(date, code\\)"),
        (D, np.array(["A", "B", "A", "A", "C"]), "duplicated"),
        (D, np.array(["B", "A", "A", "B", "C"]), "positions 1"),
    ],
)
def test_unsorted_or_duplicate_samples_are_refused(dates: np.ndarray, codes: np.ndarray, match: str) -> None:
    with pytest.raises(DataContractError, match=match):
        small(dates=dates, codes=codes)


def test_contract_errors_name_the_problem() -> None:
    with pytest.raises(DataContractError, match="expected 2 names"):
        small(feature_names=("f",))
    with pytest.raises(DataContractError, match="bins >= 0.*-1"):
        small(relevance=np.array([1, 0, -1, 0, 1]))
    with pytest.raises(DataContractError, match="missing values"):
        small(relevance=np.array([1, 0, np.nan, 0, 1]))
    with pytest.raises(DataContractError, match="wide, date_pos and code_pos go together"):
        small(wide=np.zeros((2, 3, 2), dtype=np.float32))


def test_take_keeps_order_shares_wide_and_records_lineage() -> None:
    data = small(relevance=np.array([1, 0, 2, 0, 1]))
    tail = data.take(np.arange(2, 5))
    assert np.shares_memory(tail.X, data.X)  # a contiguous range is a view
    np.testing.assert_array_equal(tail.rows, [2, 3, 4])
    inner = tail.take(np.array([0, 2]))
    np.testing.assert_array_equal(inner.rows, [0, 2])  # positions in its parent, tail
    assert inner.parent is tail and tail.parent is data
    np.testing.assert_array_equal(inner.rows_in(data), [2, 4])
    np.testing.assert_array_equal(inner.rows_in(inner), [0, 1])
    assert inner.rows_in(small()) is None  # equal content, another lineage
    np.testing.assert_array_equal(inner.X, data.X[[2, 4]])
    np.testing.assert_array_equal(inner.relevance, [2, 1])
    with pytest.raises(DataContractError, match="strictly increasing"):
        data.take(np.array([3, 1]))
    np.testing.assert_array_equal(data.between("2024-01-03", None).rows, [2, 3, 4])


def test_a_scattered_take_copies_x_only_when_x_is_read() -> None:
    import tracemalloc

    rng = np.random.default_rng(0)
    n_days, n_stocks = 400, 50
    dates = np.repeat(np.arange(n_days).astype("datetime64[D]").astype("datetime64[ns]"), n_stocks)
    codes = np.tile(np.array([f"c{i:02d}" for i in range(n_stocks)]), n_days)
    data = RankingData(
        rng.normal(size=(n_days * n_stocks, 300)).astype(np.float32), dates, codes, tuple(f"f{i}" for i in range(300))
    )  # 24 MB of features
    keep = np.flatnonzero(rng.random(data.n_samples) < 0.97)
    tracemalloc.start()
    samples = data.take(keep).with_relevance(np.zeros(len(keep), dtype=np.int64))
    train = samples.take(np.arange(100, 15_000))  # a fold's window of the samples
    blocks = train.feature_blocks()
    span, at = train.row_span()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < data.X.nbytes / 20  # no copy of the features so far
    assert (samples.n_samples, samples.n_features) == (len(keep), 300)
    assert all(np.shares_memory(b, data.X) for b in blocks) and len(blocks) > 1  # views of the runs
    np.testing.assert_array_equal(np.vstack(blocks), data.X[keep[100:15_000]])
    assert np.shares_memory(span, data.X) and len(span) == keep[14_999] - keep[100] + 1  # one view, gaps too
    np.testing.assert_array_equal(span[at], data.X[keep[100:15_000]])
    np.testing.assert_array_equal(train.feature_values(np.array([0, 7, 14_899])), data.X[keep[[100, 107, 14_999]]])
    np.testing.assert_array_equal(train.rows_in(data), keep[100:15_000])
    np.testing.assert_array_equal(train.X, data.X[keep[100:15_000]])  # read: the rows are copied now
    assert not np.shares_memory(train.X, data.X)


def test_shipped_codes_pickle_as_integers_and_are_passed_on_without_factorising_again(monkeypatch) -> None:
    """What goes to a worker (``compact``, which ``by_file`` applies too) pickles the stock codes as their
    distinct values and an int32 position a row, not one string a row; the worker gets the same codes, and
    passing them on to another worker reuses the parts it received."""
    import pickle

    from models import data as data_module

    n_days, n_stocks = 2_000, 100
    dates = np.repeat(np.arange(n_days).astype("datetime64[D]").astype("datetime64[ns]"), n_stocks)
    # one str object a row, as the panel's codes arrive (a plain pickle writes each of them in full)
    codes = np.tile(np.array([f"{600000 + i}.XSHG" for i in range(n_stocks)]), n_days).astype(object)
    data = RankingData(np.zeros((n_days * n_stocks, 2), dtype=np.float32), dates, codes, ("f", "g"))
    samples = data.take(np.arange(0, data.n_samples, 2))
    shipped = pickle.dumps(samples.compact(), protocol=5)
    n = samples.n_samples
    assert len(pickle.dumps(samples.codes, protocol=5)) > 12 * n  # a string a row
    assert len(pickle.dumps(samples.compact().codes, protocol=5)) < 4 * n + 20 * n_stocks + 500  # an int32 a row
    received = pickle.loads(shipped)
    np.testing.assert_array_equal(received.codes, samples.codes)
    np.testing.assert_array_equal(received.parent.codes, codes)
    assert not received.codes.flags.writeable  # its parts stay its values'

    factorised: list[int] = []
    real = data_module.pd.factorize
    monkeypatch.setattr(data_module.pd, "factorize", lambda v, **kw: factorised.append(len(v)) or real(v, **kw))
    passed_on = pickle.dumps(received, protocol=5)
    assert factorised == [] and len(passed_on) == len(shipped)
    np.testing.assert_array_equal(received.X, samples.X)
    part = pickle.loads(pickle.dumps(received.codes[5:9], protocol=5))  # a selection is factorised anew
    assert factorised == [4] and part.tolist() == samples.codes[5:9].tolist()
    unicode = data.take(np.arange(3)).compact().codes  # codes that are not Python objects stay as they are
    assert type(small().compact().codes) is np.ndarray and unicode.dtype == object


def test_from_frame_with_tensor_aligns_samples_to_the_grid() -> None:
    idx = pd.MultiIndex.from_arrays([pd.DatetimeIndex(D), C], names=["date", "code"])
    frame = pd.DataFrame({"f": [1.0, 2.0, 3.0, np.nan, 5.0]}, index=idx)
    wide, grid = feature_tensor(frame)
    assert wide.shape == (2, 3, 1)
    np.testing.assert_array_equal(wide[:, :, 0], [[1.0, 2.0, np.nan], [3.0, np.nan, 5.0]])
    members = frame.drop(index=[(pd.Timestamp("2024-01-03"), "A")])  # a subset of the tensor's rows
    data = RankingData.from_frame(members, tensor=(wide, grid))
    np.testing.assert_array_equal(data.date_pos, [0, 0, 1, 1])
    np.testing.assert_array_equal(data.code_pos, [0, 1, 1, 2])
    shifted = (np.roll(wide, 1, axis=1), grid)
    with pytest.raises(DataContractError, match="X and wide disagree"):
        RankingData.from_frame(members, tensor=shifted)


def test_window_view_exact_values_masks_and_prehistory() -> None:
    # wide[t, c, 0] = 10 * t + c, wide[t, c, 1] = -(10 * t + c); stock 2 missing on day 1
    t, c = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
    wide = np.stack([10 * t + c, -(10 * t + c)], axis=-1).astype(np.float32)
    wide[1, 2, :] = np.nan
    x, mask = window_view(wide, np.array([1, 3]), window=3)
    assert x.shape == (2, 3, 3, 2) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0, 1, :, 0], [0.0, 1.0, 11.0])  # day 1: t = -1 (before data) is 0
    np.testing.assert_array_equal(x[1, 0, :, 1], [-10.0, -20.0, -30.0])
    np.testing.assert_array_equal(x[1, 2, :, 0], [0.0, 22.0, 32.0])  # NaN on day 1 -> 0
    np.testing.assert_array_equal(mask, [[True, True, False], [True, True, True]])
    assert np.isnan(wide[1, 2]).all()  # the source keeps its NaN
    # explicit per-day stocks, padded with -1
    x2, mask2 = window_view(wide, np.array([1, 3]), window=2, code_positions=np.array([[2, -1], [1, 0]]))
    np.testing.assert_array_equal(mask2, [[True, False], [True, True]])
    np.testing.assert_array_equal(x2[0, 0, :, 0], [2.0, 0.0])
    np.testing.assert_array_equal(x2[0, 1], np.zeros((2, 2)))
    np.testing.assert_array_equal(x2[1, 0, :, 0], [21.0, 31.0])
    np.testing.assert_array_equal(x2[1, 1, :, 0], [20.0, 30.0])
    # the torch path gathers the same values from a NaN-free tensor
    xt, maskt = window_view(
        torch.from_numpy(np.nan_to_num(wide)), torch.tensor([1, 3]), 2, code_positions=torch.tensor([[2, -1], [1, 0]])
    )
    np.testing.assert_array_equal(xt.numpy(), x2)
    np.testing.assert_array_equal(maskt.numpy(), mask2)


def test_window_source_without_tensor_uses_the_samples_own_grid() -> None:
    data = small()
    wide, dpos, cpos = data.window_source()
    assert wide.shape == (2, 3, 2)
    np.testing.assert_array_equal(wide[dpos, cpos], data.X)
    assert np.isnan(wide[0, 2]).all()  # C has no sample on the first day


# ---------------------------------------------------------------------------- the target and the protocol


def test_the_target_keeps_its_kind() -> None:
    levels = small(relevance=np.array([1, 0, 2, 0, 1], dtype=np.int32))
    assert levels.relevance.dtype == np.int64
    raw = levels.with_relevance(np.array([0.012, -0.03, 0.0, 0.004, -0.001]))
    assert raw.relevance.dtype == np.float64 and raw.relevance.min() < 0  # a raw return is not cut to a level
    np.testing.assert_array_equal(raw.take(np.array([1, 3])).relevance, [-0.03, 0.004])
    assert levels.with_relevance(np.array([1.0, 0.0, 2.0, 0.0, 1.0])).relevance.dtype == np.float64


def test_both_rankers_implement_the_protocol_with_its_optional_members() -> None:
    from models.lambdarank import LambdaRankConfig

    for ranker in (LambdaRankRanker(), StockTransformerRanker()):
        assert isinstance(ranker, Ranker)
        assert ranker.stateful is False and ranker.ndcg_depth == 5 and ranker.ndcg_gain == "linear"
    assert LambdaRankRanker.accepted_labels == {"bins", "three_class"}
    assert StockTransformerRanker.accepted_labels == {"raw", "rank", "bins", "three_class"}
    warm = LambdaRankRanker(LambdaRankConfig(warm_start=True, ndcg_depth=3, label_gain="exponential"))
    assert warm.stateful and (warm.ndcg_depth, warm.ndcg_gain) == (3, "exponential")


def test_a_refused_label_names_what_was_expected_received_and_the_fix() -> None:
    check_label_processing(LambdaRankRanker, "bins")
    check_label_processing(StockTransformerRanker(), "raw")
    with pytest.raises(ConfigError) as refusal:
        check_label_processing(LambdaRankRanker(), "raw")
    assert str(refusal.value) == (
        "LambdaRankRanker cannot learn from label.processing=raw: expected one of bins, three_class, received raw.\n"
        "  fix: label=default (bins) or label=three_class, or model=linear or model=stock_transformer"
    )
    with pytest.raises(ConfigError, match="expected one of raw, rank, bins, three_class, received 'ranks'"):
        check_label_processing(StockTransformerRanker, "ranks")
    with pytest.raises(ConfigError, match="declaring accepted_labels"):
        check_label_processing(object(), "bins")

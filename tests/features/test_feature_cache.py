"""The feature cache: hit, miss, invalidation, listing, clearing, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest

import backtest.features.build as build_module
from backtest.features import FeatureCache, FeatureSetSpec, load_or_build_features

SPEC = FeatureSetSpec(name="small", indicators=("ret_1d", "ret_5d", "mf_main_net_rate", "log_mv"))


def test_second_build_loads_the_same_matrix(panel, tmp_path):
    first, hit1 = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    second, hit2 = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert (hit1, hit2) == (False, True)
    assert second.names == first.names and second.fingerprint == first.fingerprint
    assert second.index.equals(first.index) and second.index.names == ["date", "code"]
    assert second.values.dtype == np.float32
    np.testing.assert_array_equal(second.values, first.values)


def test_loaded_values_are_a_read_only_map_or_an_array(panel, tmp_path):
    built, _ = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    mapped = FeatureCache(tmp_path, mmap=True).load(built.fingerprint)
    assert isinstance(mapped.values, np.memmap) and not mapped.values.flags.writeable
    with pytest.raises(ValueError):
        mapped.values[0, 0] = 1.0  # the cache cannot be changed through a loaded matrix
    in_memory = FeatureCache(tmp_path).load(built.fingerprint)
    assert not isinstance(in_memory.values, np.memmap) and in_memory.values.flags.writeable
    np.testing.assert_array_equal(in_memory.values, mapped.values)


def test_any_change_misses(panel, tmp_path, monkeypatch):
    base, _ = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    _, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d2")  # other data
    assert not hit
    other = FeatureSetSpec(name="small", indicators=("ret_1d", "ret_5d", "mf_main_net_rate", "log_mv"), cs_z=False)
    _, hit = load_or_build_features(panel, other, tmp_path, data_fingerprint="d1")  # other set
    assert not hit
    _, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1", rows="all")  # other rows
    assert not hit
    monkeypatch.setattr(build_module, "FEATURE_CODE_VERSION", "changed")  # other feature code
    again, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert not hit and again.fingerprint != base.fingerprint
    assert len(FeatureCache(tmp_path).entries()) == 5


def test_data_fingerprint_defaults_to_the_panel_content(panel, tmp_path):
    _, hit = load_or_build_features(panel, SPEC, tmp_path)
    _, hit_again = load_or_build_features(panel.copy(), SPEC, tmp_path)
    changed = panel.copy()
    changed.iloc[100, changed.columns.get_loc("close")] *= 1.01
    _, hit_changed = load_or_build_features(changed, SPEC, tmp_path)
    assert (hit, hit_again, hit_changed) == (False, True, False)


def test_entries_and_clear(panel, tmp_path):
    cache = FeatureCache(tmp_path / "features")
    assert cache.entries() == [] and cache.clear() == 0
    a, _ = load_or_build_features(panel, SPEC, cache, data_fingerprint="d1")
    b, _ = load_or_build_features(panel, SPEC, cache, data_fingerprint="d2")
    entries = cache.entries()
    assert [e.key for e in entries] == [a.fingerprint, b.fingerprint]  # oldest first
    assert all(e.size_bytes > a.values.nbytes and e.feature_set == "small" for e in entries)
    assert (entries[0].n_rows, entries[0].n_features) == a.shape
    assert cache.clear([a.fingerprint]) == 1
    assert [e.key for e in cache.entries()] == [b.fingerprint]
    assert cache.clear() == 1 and cache.entries() == []
    _, hit = load_or_build_features(panel, SPEC, cache, data_fingerprint="d1")
    assert not hit


def test_an_interrupted_write_leaves_no_entry(panel, tmp_path, monkeypatch):
    cache = FeatureCache(tmp_path)
    import backtest.features.cache as cache_module

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module.np, "savez", killed)
    with pytest.raises(KeyboardInterrupt):
        load_or_build_features(panel, SPEC, cache, data_fingerprint="d1")
    assert cache.entries() == [] and list(tmp_path.iterdir()) == []


def test_leftovers_of_a_killed_process_are_ignored_and_cleared(panel, tmp_path):
    cache = FeatureCache(tmp_path)
    matrix, _ = load_or_build_features(panel, SPEC, cache, data_fingerprint="d1")
    key = matrix.fingerprint
    # a process killed mid-write leaves its temporary folder (half a values file, no meta)
    leftover = tmp_path / f".tmp-{key}-999-deadbeef"
    leftover.mkdir()
    (leftover / "values.npy").write_bytes(b"\x93NUMPY half")
    # a folder without meta.json under a real-looking key is not an entry either
    (tmp_path / ("0" * 32)).mkdir()
    assert [e.key for e in cache.entries()] == [key]
    assert cache.load("0" * 32) is None
    assert cache.clear() == 2  # the entry and the meta-less folder; the leftover is removed too
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_entry_is_rebuilt(panel, tmp_path):
    matrix, _ = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    (tmp_path / matrix.fingerprint / "values.npy").write_bytes(b"garbage")
    assert FeatureCache(tmp_path).load(matrix.fingerprint) is None
    again, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert not hit
    np.testing.assert_array_equal(again.values, matrix.values)
    assert load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")[1]

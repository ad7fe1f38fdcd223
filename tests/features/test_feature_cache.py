"""The feature cache: hit, miss, invalidation, listing, clearing, atomic writes, damaged entries."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pytest

import backtest.features.build as build_module
from backtest.data.synthetic import generate_market
from backtest.features import FeatureCache, FeatureSetSpec, build_features, load_or_build_features
from backtest.memory import read_rows, row_chunks

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
    monkeypatch.setattr(build_module, "FEATURE_CODE_VERSION", "changed")  # feature code, by hand
    again, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert not hit and again.fingerprint != base.fingerprint
    real = build_module.code_fingerprint
    monkeypatch.setattr(build_module, "code_fingerprint", lambda scope: real(scope) + "-edited")  # its source
    edited, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert not hit and edited.fingerprint not in (base.fingerprint, again.fingerprint)
    assert len(FeatureCache(tmp_path).entries()) == 6


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


def test_a_miss_built_into_the_entrys_file_is_the_matrix_built_in_memory(panel, tmp_path):
    """A memory-mapped cache builds a miss straight into the entry's file: the same values, the same file
    as storing the matrix built in memory, read back mapped, and a hit afterwards."""
    in_memory = build_features(panel, SPEC, data_fingerprint="d1")
    mapped = FeatureCache(tmp_path / "mapped", mmap=True)
    built, hit = load_or_build_features(panel, SPEC, mapped, data_fingerprint="d1")
    assert not hit and isinstance(built.values, np.memmap) and not built.values.flags.writeable
    assert built.values.tobytes() == in_memory.values.tobytes() and built.fingerprint == in_memory.fingerprint
    assert built.index.equals(in_memory.index) and built.names == in_memory.names
    stored = FeatureCache(tmp_path / "stored").store(in_memory, SPEC)
    entry = tmp_path / "mapped" / built.fingerprint
    assert (entry / "values.npy").read_bytes() == (stored / "values.npy").read_bytes()
    again, hit = load_or_build_features(panel, SPEC, mapped, data_fingerprint="d1")
    assert hit and again.values.tobytes() == in_memory.values.tobytes()


@pytest.mark.parametrize("mmap", [False, True], ids=["in memory", "into the file"])
def test_an_interrupted_write_leaves_no_entry(panel, tmp_path, monkeypatch, mmap):
    cache = FeatureCache(tmp_path, mmap=mmap)
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


def _damage(entry, matrix, how: str) -> None:
    values = entry / "values.npy"
    raw = values.read_bytes()
    header = len(raw) - matrix.values.nbytes
    if how == "junk values":  # the header kept: a float32 array of the right shape, other numbers
        junk = np.random.default_rng(0).standard_normal(matrix.values.size).astype(np.float32)
        values.write_bytes(raw[:header] + junk.tobytes())
    elif how == "truncated values":
        values.write_bytes(raw[: header + matrix.values.nbytes // 2])
    elif how == "junk index":
        index = entry / "index.npz"
        index.write_bytes(np.random.default_rng(0).bytes(index.stat().st_size))
    elif how == "columns renamed":  # meta.json of the same size naming the columns in another order
        meta = json.loads((entry / "meta.json").read_text())
        meta["names"] = meta["names"][::-1]
        (entry / "meta.json").write_text(json.dumps(meta))
    elif how == "no checksums":  # an entry written before checksums
        meta = json.loads((entry / "meta.json").read_text())
        (entry / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if "checksum" not in k}))


@pytest.mark.parametrize("how", ["junk values", "truncated values", "junk index", "columns renamed", "no checksums"])
def test_a_damaged_entry_is_discarded_with_one_warning_and_rebuilt(how, panel, tmp_path, caplog):
    stored, _ = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    size = (tmp_path / stored.fingerprint / "values.npy").stat().st_size
    _damage(tmp_path / stored.fingerprint, stored, how)
    if how == "junk values":
        assert (tmp_path / stored.fingerprint / "values.npy").stat().st_size == size
    with caplog.at_level(logging.WARNING, logger="backtest.features"):
        again, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not hit
    assert len(warnings) == 1 and "corrupt" in warnings[0] and stored.fingerprint in warnings[0]
    fresh = build_features(panel, SPEC, data_fingerprint="d1")
    assert again.names == fresh.names and again.index.equals(fresh.index)
    assert again.values.tobytes() == fresh.values.tobytes()
    reread, hit = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    assert hit and reread.values.tobytes() == fresh.values.tobytes()  # stored again, whole


def test_a_memory_mapped_load_checks_the_values_too(panel, tmp_path):
    stored, _ = load_or_build_features(panel, SPEC, tmp_path, data_fingerprint="d1")
    _damage(tmp_path / stored.fingerprint, stored, "junk values")
    assert FeatureCache(tmp_path, mmap=True).load(stored.fingerprint) is None
    assert not (tmp_path / stored.fingerprint).exists()


#: SHA-256 of the default market's default matrix (``features=all``; its bytes in row order), the matrix every
#: recorded figure of benchmarks/README.md was measured on
DEFAULT_MATRIX_SHA256 = "80389eaf2e02b370"


@pytest.mark.slow
def test_the_default_matrix_built_into_the_cache_keeps_its_bytes(tmp_path):
    """The main job's matrix, built straight into a memory-mapped entry and read back from it, is the one
    the benchmarks were measured on, bit for bit (the in-memory build is the same: the test above)."""
    panel = generate_market()
    matrix, hit = load_or_build_features(panel, FeatureSetSpec(), FeatureCache(tmp_path, mmap=True))
    assert not hit and matrix.shape == (582_600, 285)
    digest = hashlib.sha256()
    for rows in row_chunks(len(matrix.values), matrix.values.strides[0]):
        digest.update(read_rows(matrix.values, rows).tobytes())
    assert digest.hexdigest()[:16] == DEFAULT_MATRIX_SHA256

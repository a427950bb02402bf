"""Activation and concept sources (`neuroneval.sources`) against the in-memory float64 path.

Every source (memory-mapped `.npy` in each dtype and order, dense and triplet shard
directories, scipy.sparse in each format, concept tables, torch tensors) must give the scores
that `neuroneval.compute` gives on a plain C-ordered float64 numpy array holding the same
values, for every metric, to 1e-12 with NaN in the same places. The data are adversarial:
heavy ties, constant and all-zero units, SAE-like units that are 95% zeros (so the top-alpha
cut falls inside the zero tie group), negative values around the zeros of a sparse matrix,
empty and full concepts, concept values of exactly 0.5.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from neuroneval import errors
from neuroneval.sources import MANIFEST, open_activations, open_concepts, write_shards, write_triplet_shards
from numpy.testing import assert_allclose

METRICS = list(neuroneval.METRICS)
ALPHAS = (0.005, 0.1)
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

N, K, T = 1000, 10, 7


def make_activations(seed: int = 0) -> np.ndarray:
    """(N, K) float64 activations whose values are all exact in float16 (|v| < 2048, on a
    coarse grid) so that every dtype holds the same numbers; columns chosen to stress ties."""
    rng = np.random.default_rng(seed)
    a = np.empty((N, K))
    a[:, 0] = np.round(rng.normal(size=N) * 8) / 8  # many ties
    a[:, 1] = 0.75  # constant: correlation etc. are NaN
    a[:, 2] = 0.0  # all zero: a sparse column with no stored entry
    sae = np.zeros(N)  # 95% zeros, positive rest: the cut at alpha = 0.1 falls on 0
    hot = rng.choice(N, size=N // 20, replace=False)
    sae[hot] = rng.integers(1, 64, size=hot.size) / 4
    a[:, 3] = sae
    mixed = np.zeros(N)  # 90% zeros with negative and positive values around them
    hot = rng.choice(N, size=N // 10, replace=False)
    mixed[hot] = rng.integers(-40, 40, size=hot.size) / 8
    a[:, 4] = mixed
    a[:, 5] = rng.integers(0, 2, size=N)  # binary
    a[:, 6] = -np.round(rng.random(N) * 1000)  # negative, wide range
    a[:, 7] = np.round(rng.normal(size=N) * 64) / 64
    a[:, 8] = np.where(rng.random(N) < 0.97, 0.0, 1.0)  # 3% ones
    a[:, 9] = np.round(rng.normal(size=N) * 4)
    assert np.array_equal(a.astype(np.float16).astype(np.float64), a)
    return a


def make_concepts(seed: int = 1) -> np.ndarray:
    """(N, T) concepts in [0, 1]: binary, soft, exactly 0.5, empty, full, rare."""
    rng = np.random.default_rng(seed)
    c = np.zeros((N, T))
    c[:, 0] = (rng.random(N) < 0.3).astype(np.float64)
    c[:, 1] = np.round(rng.random(N) * 16) / 16  # soft, values of 0.5 among them
    c[:, 2] = 0.5 * (rng.random(N) < 0.5)  # exactly 0.5 is a positive label
    c[:, 3] = 0.0  # empty concept: NaN for metrics without a positive label
    c[:, 4] = 1.0  # full concept
    c[:, 5] = (rng.random(N) < 0.02).astype(np.float64)  # rare
    c[:, 6] = np.where(rng.random(N) < 0.9, 0.0, np.round(rng.random(N) * 8) / 8)  # mostly 0, soft
    return c


A64 = make_activations()
C64 = make_concepts()


def reference(a: Any, c: Any, alpha: float, pairs: Any = None) -> dict[str, np.ndarray]:
    """The in-memory path on plain C-ordered float64 arrays: the reference for every source."""
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    c = np.ascontiguousarray(np.asarray(c, dtype=np.float64))
    assert type(a) is np.ndarray and type(c) is np.ndarray
    return neuroneval.compute(a, c, METRICS, alpha=alpha, pairs=pairs)


def assert_same(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    assert list(got) == list(ref)
    for m in ref:
        assert got[m].dtype == np.float64, m
        assert got[m].shape == ref[m].shape, m
        assert_allclose(got[m], ref[m], rtol=0, atol=1e-12, equal_nan=True, err_msg=m)


def test_the_data_are_adversarial() -> None:
    """The fixtures do what the tests rely on: the cut of the SAE-like unit falls inside its
    zero tie group at alpha = 0.1, not at alpha = 0.005, and the reference has NaN somewhere."""
    for col in (3, 4, 8):
        ordered = np.sort(A64[:, col])[::-1]
        assert ordered[int(np.ceil(0.1 * N)) - 1] == 0.0, col
        assert ordered[int(np.ceil(0.005 * N)) - 1] != 0.0, col
    ref = reference(A64, C64, 0.1)
    assert np.isnan(ref["correlation"]).any() and not np.isnan(ref["correlation"]).all()
    assert np.isnan(ref["inverse_auprc"]).any() and not np.isnan(ref["inverse_auprc"]).all()


# ---------------------------------------------------------------------------------------------
# Activation sources. Each builder returns (source, the float64 values the source holds).
# ---------------------------------------------------------------------------------------------


def _npy(tmp: Path, a: np.ndarray, name: str = "a.npy") -> Path:
    path = tmp / name
    np.save(path, a)
    return path


def _triplet_dir(tmp: Path, a: np.ndarray, *, n_files: int = 3, names: list[str] | None = None) -> Path:
    """A triplet shard directory written by hand: the nonzeros of `a` plus some explicit
    zeros, shuffled, split unevenly over `n_files` .npz files (one of them empty)."""
    rng = np.random.default_rng(7)
    rows, cols = np.nonzero(a)
    zr, zc = np.nonzero(a == 0)
    pick = rng.choice(zr.size, size=min(50, zr.size), replace=False)  # stored zeros
    rows = np.concatenate([rows, zr[pick]])
    cols = np.concatenate([cols, zc[pick]])
    order = rng.permutation(rows.size)
    rows, cols = rows[order], cols[order]
    values = a[rows, cols]
    cuts = [0, 0, rows.size // 3, rows.size]  # the first file holds no triplet
    d = tmp / "triplets"
    d.mkdir()
    shards = []
    for i in range(n_files):
        lo, hi = cuts[min(i, len(cuts) - 2)], cuts[min(i + 1, len(cuts) - 1)]
        f = f"t-{i}.npz"
        np.savez(d / f, row=rows[lo:hi].astype(np.int32), column=cols[lo:hi].astype(np.int64), value=values[lo:hi])
        shards.append({"file": f})
    manifest: dict[str, Any] = {
        "format": "neuroneval-shards",
        "version": 1,
        "layout": "triplets",
        "n_rows": a.shape[0],
        "n_columns": a.shape[1],
        "shards": shards,
    }
    if names is not None:
        manifest["names"] = names
    (d / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return d


def _coo_with_duplicates(a: np.ndarray) -> sp.coo_matrix:
    """A COO matrix whose value at each nonzero is split into two stored halves, plus pairs
    that cancel to an explicit zero: scipy sums duplicates, so it still equals `a`."""
    rows, cols = np.nonzero(a)
    vals = a[rows, cols]
    zr, zc = np.nonzero(a == 0)
    zr, zc = zr[:40], zc[:40]
    r = np.concatenate([rows, rows, zr, zr])
    c = np.concatenate([cols, cols, zc, zc])
    v = np.concatenate([vals / 2, vals / 2, np.full(zr.size, 0.25), np.full(zr.size, -0.25)])
    order = np.random.default_rng(3).permutation(r.size)
    m = sp.coo_matrix((v[order], (r[order], c[order])), shape=a.shape)
    assert not m.has_canonical_format
    return m


def _csr_with_stored_zeros(a: np.ndarray) -> sp.csr_matrix:
    """A CSR matrix that stores some zeros explicitly (scipy keeps them as entries)."""
    rows, cols = np.nonzero(a)
    zr, zc = np.nonzero(a == 0)
    zr, zc = zr[::97], zc[::97]
    r, c = np.concatenate([rows, zr]), np.concatenate([cols, zc])
    out = sp.csr_matrix((np.concatenate([a[rows, cols], np.zeros(zr.size)]), (r, c)), shape=a.shape)
    assert out.nnz == np.count_nonzero(a) + zr.size > np.count_nonzero(a)
    assert np.array_equal(out.toarray(), a)
    return out


def _csc_unsorted(a: np.ndarray) -> sp.csc_matrix:
    """A CSC matrix with its row indices reversed inside every column (not canonical)."""
    m = sp.csc_matrix(a)
    indices, data = m.indices.copy(), m.data.copy()
    for j in range(a.shape[1]):
        lo, hi = m.indptr[j], m.indptr[j + 1]
        indices[lo:hi] = indices[lo:hi][::-1]
        data[lo:hi] = data[lo:hi][::-1]
    out = sp.csc_matrix((data, indices, m.indptr.copy()), shape=a.shape)
    out.has_sorted_indices = False
    assert np.array_equal(out.toarray(), a)
    return out


def _torch(a: np.ndarray, dtype_name: str, transpose: bool = False) -> Any:
    import torch

    dtype = getattr(torch, dtype_name)
    if transpose:  # a non-contiguous view
        return torch.from_numpy(np.ascontiguousarray(a.T)).to(dtype).T
    return torch.from_numpy(a).to(dtype)


Builder = Callable[[Path, np.ndarray], tuple[Any, np.ndarray]]

ACTIVATION_SOURCES: dict[str, Builder] = {
    "npy-f16": lambda tmp, a: (_npy(tmp, a.astype(np.float16)), a.astype(np.float16).astype(np.float64)),
    "npy-f32": lambda tmp, a: (_npy(tmp, a.astype(np.float32)), a.astype(np.float32).astype(np.float64)),
    "npy-f64": lambda tmp, a: (_npy(tmp, a), a),
    "npy-f32-fortran": lambda tmp, a: (_npy(tmp, np.asfortranarray(a.astype(np.float32))), a),
    "npy-f64-fortran": lambda tmp, a: (_npy(tmp, np.asfortranarray(a)), a),
    "npy-f16-fortran": lambda tmp, a: (_npy(tmp, np.asfortranarray(a.astype(np.float16))), a),
    "npy-int32": lambda tmp, a: (_npy(tmp, np.round(a * 4).astype(np.int32)), np.round(a * 4)),
    "shards-odd": lambda tmp, a: (write_shards(tmp / "s", [a[:1], a[1:2], a[2:39], a[39:998], a[998:]]), a),
    "shards-one-row-each-first": lambda tmp, a: (
        write_shards(tmp / "s", [a[i : i + 1] for i in range(5)] + [a[5:]]),
        a,
    ),
    "shards-f16": lambda tmp, a: (write_shards(tmp / "s", [a[:333].astype(np.float16), a[333:].astype(np.float16)]), a),
    "shards-f32-single": lambda tmp, a: (write_shards(tmp / "s", [a.astype(np.float32)]), a),
    "triplets": lambda tmp, a: (_triplet_dir(tmp, a), a),
    "csr": lambda tmp, a: (sp.csr_matrix(a), a),
    "csr-array-f32": lambda tmp, a: (sp.csr_array(a.astype(np.float32)), a),
    "csr-stored-zeros": lambda tmp, a: (_csr_with_stored_zeros(a), a),
    "csc": lambda tmp, a: (sp.csc_matrix(a), a),
    "csc-unsorted": lambda tmp, a: (_csc_unsorted(a), a),
    "coo-duplicates": lambda tmp, a: (_coo_with_duplicates(a), _coo_with_duplicates(a).toarray()),
    "coo-int": lambda tmp, a: (sp.coo_matrix(np.round(a).astype(np.int64)), np.round(a)),
    "array-f32-strided": lambda tmp, a: (np.asfortranarray(np.repeat(a.astype(np.float32), 2, axis=1))[:, ::2], a),
}
TORCH_SOURCES: dict[str, Builder] = {
    "torch-f32": lambda tmp, a: (_torch(a, "float32"), a),
    "torch-f16": lambda tmp, a: (_torch(a, "float16"), a),
    "torch-bf16": lambda tmp, a: (_torch(a, "bfloat16"), _torch(a, "bfloat16").float().numpy().astype(np.float64)),
    "torch-f64-transposed": lambda tmp, a: (_torch(a, "float64", transpose=True), a),
}


def _torch_params() -> list[Any]:
    return [pytest.param(k, marks=needs_torch) for k in TORCH_SOURCES]


ALL_ACTIVATION_SOURCES = {**ACTIVATION_SOURCES, **TORCH_SOURCES}


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("kind", list(ACTIVATION_SOURCES) + _torch_params())
def test_activation_source_equals_in_memory_float64(tmp_path: Path, kind: str, alpha: float) -> None:
    src, values = ALL_ACTIVATION_SOURCES[kind](tmp_path, A64)
    assert values.dtype == np.float64
    got = neuroneval.compute(src, C64, METRICS, alpha=alpha)
    assert_same(got, reference(values, C64, alpha))


def test_npy_sources_are_memory_maps_in_their_own_dtype(tmp_path: Path) -> None:
    """A `.npy` file is read in place: a memory map of its dtype, not a float64 copy."""
    for dtype in (np.float16, np.float32, np.float64):
        path = _npy(tmp_path, A64.astype(dtype), f"a-{np.dtype(dtype).name}.npy")
        src = open_activations(path)
        assert src.kind == "npy"
        assert src.dtype == np.dtype(dtype)
        assert isinstance(src.core, np.memmap)
        assert src.shape == A64.shape
        assert src.files == (path,)
        assert np.array_equal(np.asarray(src.core, dtype=np.float64), A64)


def test_big_endian_npy(tmp_path: Path) -> None:
    """A big-endian `.npy` (what a big-endian machine writes) must be read correctly or refused
    with a neuroneval error; a raw TypeError from the extension is neither."""
    for dtype in (">f8", ">f4"):
        path = _npy(tmp_path, A64.astype(dtype), f"be{dtype[-1]}.npy")
        try:
            got = neuroneval.compute(path, C64, METRICS, alpha=0.1)
        except errors.NeuronEvalError as e:
            assert isinstance(e, (errors.DTypeError, errors.SourceError)), e
            assert "endian" in str(e).lower() or "byte order" in str(e).lower(), str(e)
        else:
            assert_same(got, reference(A64, C64, 0.1))


def test_empty_shard_round_trips_or_is_refused_when_written(tmp_path: Path) -> None:
    """A shard of 0 rows (a worker that saw no data): `write_shards` must not write a directory
    that the readers then refuse. Either it refuses at write time, leaving no manifest, or the
    directory reads back as the stacked rows."""
    d = tmp_path / "s"
    shards = [A64[:400], A64[400:400], A64[400:999], A64[999:]]
    try:
        write_shards(d, shards)
    except errors.NeuronEvalError:
        assert not (d / MANIFEST).exists()
        return
    assert open_activations(d).shape == A64.shape
    assert_same(neuroneval.compute(d, C64, METRICS, alpha=0.1), reference(A64, C64, 0.1))


def test_sparse_source_keeps_its_stored_entries_only(tmp_path: Path) -> None:
    """Sparse data reach the core as CSC without densifying: the stored values, not N*K."""
    a = A64[:, [2, 3, 4, 8]]  # the mostly-zero units
    src = open_activations(sp.csr_matrix(a))
    assert src.kind == "sparse"
    rows, indptr, indices, values = src.core
    assert rows == N
    assert values.size == np.count_nonzero(a) < a.size // 5
    assert indptr.size == a.shape[1] + 1 and indptr[-1] == values.size
    dense = np.zeros_like(a)
    for j in range(a.shape[1]):
        dense[indices[indptr[j] : indptr[j + 1]], j] = values[indptr[j] : indptr[j + 1]]
    assert np.array_equal(dense, a)
    trip = open_activations(_triplet_dir(tmp_path, a))
    assert trip.kind == "sparse" and trip.shape == a.shape


# ---------------------------------------------------------------------------------------------
# Concept sources.
# ---------------------------------------------------------------------------------------------


def _table(tmp: Path, c: np.ndarray, suffix: str, names: list[str], *, value_col: str = "probability") -> Path:
    """The nonzeros of `c` (plus a few explicit zeros) as (input, concept, probability) rows,
    shuffled; `names[t]` names column t."""
    rows, cols = np.nonzero(c)
    zr, zc = np.nonzero(c == 0)
    rows = np.concatenate([rows, zr[:25]])
    cols = np.concatenate([cols, zc[:25]])
    order = np.random.default_rng(11).permutation(rows.size)
    rows, cols = rows[order], cols[order]
    df = pl.DataFrame(
        {
            "input": rows.astype(np.int64),
            "concept": [names[j] for j in cols],
            value_col: c[rows, cols],
        }
    )
    path = tmp / f"concepts{suffix}"
    if suffix == ".csv":
        df.write_csv(path)
    else:
        df.write_parquet(path)
    return path


# Names whose sorted order differs from column order, so that ordering mistakes show.
CONCEPT_NAMES = ["zebra", "apple", "mango", "kiwi", "banana", "cherry", "date"]

CONCEPT_SOURCES: dict[str, Builder] = {
    "npy-f32": lambda tmp, c: (_npy(tmp, c.astype(np.float32), "c.npy"), c),
    "npy-f16-fortran": lambda tmp, c: (_npy(tmp, np.asfortranarray(c.astype(np.float16)), "c.npy"), c),
    "npy-uint8-binary": lambda tmp, c: (_npy(tmp, (c >= 0.5).astype(np.uint8), "c.npy"), (c >= 0.5) * 1.0),
    "shards": lambda tmp, c: (write_shards(tmp / "cs", [c[:1], c[1:500], c[500:]]), c),
    "triplets": lambda tmp, c: (_triplet_dir(tmp, c), c),
    "csr": lambda tmp, c: (sp.csr_matrix(c), c),
    "csc-unsorted": lambda tmp, c: (_csc_unsorted(c), c),
    "coo-duplicates": lambda tmp, c: (
        _coo_with_duplicates(np.minimum(c, 0.5)),
        _coo_with_duplicates(np.minimum(c, 0.5)).toarray(),
    ),
    "csr-stored-zeros": lambda tmp, c: (_csr_with_stored_zeros(c), c),
    "parquet-named": lambda tmp, c: (_table(tmp, c, ".parquet", CONCEPT_NAMES), c),
    "csv-named": lambda tmp, c: (_table(tmp, c, ".csv", CONCEPT_NAMES), c),
}


def _open_concept_arg(src: Any) -> dict[str, Any]:
    if isinstance(src, Path) and src.suffix in (".csv", ".parquet"):
        return {"concept_names": CONCEPT_NAMES}
    return {}


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("kind", list(CONCEPT_SOURCES))
def test_concept_source_equals_in_memory_float64(tmp_path: Path, kind: str, alpha: float) -> None:
    src, values = CONCEPT_SOURCES[kind](tmp_path, C64)
    conc = open_concepts(src, n_inputs=N, **_open_concept_arg(src))
    assert conc.shape == (N, T)
    got = neuroneval.compute(A64, conc, METRICS, alpha=alpha)
    assert_same(got, reference(A64, values, alpha))
    if not _open_concept_arg(src):  # tables need n_inputs and names: compute opens the rest itself
        assert_same(neuroneval.compute(A64, src, METRICS, alpha=alpha), reference(A64, values, alpha))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_concept_table_order_and_names(tmp_path: Path, suffix: str) -> None:
    path = _table(tmp_path, C64, suffix, CONCEPT_NAMES)
    # Default order: the table's names, sorted.
    src = open_concepts(path, n_inputs=N)
    assert src.names == sorted(CONCEPT_NAMES)
    perm = [CONCEPT_NAMES.index(n) for n in sorted(CONCEPT_NAMES)]
    assert_same(neuroneval.compute(A64, path, METRICS, alpha=0.1), reference(A64, C64[:, perm], 0.1))
    # An explicit list is respected, and may name concepts the table never mentions (all 0).
    listed = ["never-seen", *CONCEPT_NAMES[::-1]]
    src = open_concepts(path, n_inputs=N, concept_names=listed)
    assert src.names == listed
    expected = np.column_stack([np.zeros(N), C64[:, ::-1]])
    assert_same(neuroneval.compute(A64, src, METRICS, alpha=0.1), reference(A64, expected, 0.1))
    table = neuroneval.score(A64, src, ["correlation"])
    assert table["concept"].to_list() == listed * K
    # A names file (one per line) works like the list.
    names_file = tmp_path / "names.txt"
    names_file.write_text("\n".join(listed) + "\n", encoding="utf-8")
    assert open_concepts(path, n_inputs=N, concept_names=names_file).names == listed
    # The table names a concept the list lacks: an error naming it.
    with pytest.raises(errors.SourceError, match="zebra"):
        open_concepts(path, n_inputs=N, concept_names=[n for n in CONCEPT_NAMES if n != "zebra"])


def test_concept_table_label_column(tmp_path: Path) -> None:
    binary = (C64 >= 0.5).astype(np.float64)
    path = _table(tmp_path, binary, ".parquet", CONCEPT_NAMES, value_col="label")
    src = open_concepts(path, n_inputs=N, concept_names=CONCEPT_NAMES)
    assert_same(neuroneval.compute(A64, src, METRICS, alpha=0.1), reference(A64, binary, 0.1))


def test_csv_concept_names_are_read_as_text(tmp_path: Path) -> None:
    """Concept names are strings: a CSV whose names look like numbers ("007", "1.50", "42")
    must keep them verbatim, not as the numbers a type-inferring reader makes of them."""
    names = ["007", "1.50", "42"]
    c = C64[:, :3]
    path = _table(tmp_path, c, ".csv", names)
    assert open_concepts(path, n_inputs=N).names == sorted(names)
    src = open_concepts(path, n_inputs=N, concept_names=names)
    assert src.names == names
    assert_same(neuroneval.compute(A64, src, METRICS, alpha=0.1), reference(A64, c, 0.1))


# ---------------------------------------------------------------------------------------------
# Paired calls through every source.
# ---------------------------------------------------------------------------------------------


PAIRS = np.array(
    [[0, 0], [9, 6], [3, 3], [3, 1], [1, 0], [4, 6], [4, 6], [2, 5], [8, 5], [0, 0], [7, 2], [6, 4], [5, 1]],
    dtype=np.int64,
)


@pytest.mark.parametrize("kind", list(ACTIVATION_SOURCES) + _torch_params())
def test_pairs_through_each_activation_source(tmp_path: Path, kind: str) -> None:
    src, values = ALL_ACTIVATION_SOURCES[kind](tmp_path, A64)
    got = neuroneval.compute(src, C64, METRICS, alpha=0.1, pairs=PAIRS)
    full = reference(values, C64, 0.1)
    assert_same(got, {m: full[m][PAIRS[:, 0], PAIRS[:, 1]] for m in METRICS})
    # The paired path on the float64 array agrees as well (so the matrix path is the reference).
    assert_same(reference(values, C64, 0.1, pairs=PAIRS), {m: full[m][PAIRS[:, 0], PAIRS[:, 1]] for m in METRICS})


@pytest.mark.parametrize("kind", list(CONCEPT_SOURCES))
def test_pairs_through_each_concept_source(tmp_path: Path, kind: str) -> None:
    src, values = CONCEPT_SOURCES[kind](tmp_path, C64)
    conc = open_concepts(src, n_inputs=N, **_open_concept_arg(src))
    got = neuroneval.compute(A64, conc, METRICS, alpha=0.1, pairs=PAIRS)
    full = reference(A64, values, 0.1)
    assert_same(got, {m: full[m][PAIRS[:, 0], PAIRS[:, 1]] for m in METRICS})


def test_pairs_with_sparse_activations_and_table_concepts(tmp_path: Path) -> None:
    path = _table(tmp_path, C64, ".parquet", CONCEPT_NAMES)
    conc = open_concepts(path, n_inputs=N, concept_names=CONCEPT_NAMES)
    got = neuroneval.compute(sp.csc_matrix(A64), conc, METRICS, alpha=0.1, pairs=PAIRS)
    full = reference(A64, C64, 0.1)
    assert_same(got, {m: full[m][PAIRS[:, 0], PAIRS[:, 1]] for m in METRICS})


# ---------------------------------------------------------------------------------------------
# Names.
# ---------------------------------------------------------------------------------------------

UNIT_NAMES = [f"layer3.{i}" for i in range(K)][::-1]


def test_manifest_names_become_the_unit_column(tmp_path: Path) -> None:
    d = write_shards(tmp_path / "s", [A64[:600], A64[600:]], names=UNIT_NAMES)
    assert open_activations(d).names == UNIT_NAMES
    table = neuroneval.score(d, C64, ["correlation", "auprc"], alpha=0.1)
    assert table["unit"].to_list() == [u for u in UNIT_NAMES for _ in range(T)]
    assert table["concept"].to_list() == list(range(T)) * K
    ref = reference(A64, C64, 0.1)
    assert_allclose(table["auprc"].to_numpy(), ref["auprc"].reshape(-1), rtol=0, atol=1e-12, equal_nan=True)
    # Explicit unit names override the manifest's.
    other = [f"u{i}" for i in range(K)]
    table = neuroneval.score(d, C64, ["correlation"], unit_names=other)
    assert table["unit"].to_list() == [u for u in other for _ in range(T)]
    assert open_activations(d, unit_names=other).names == other
    names_file = tmp_path / "units.txt"
    names_file.write_text("\n".join(other) + "\n", encoding="utf-8")
    assert open_activations(d, unit_names=names_file).names == other


def test_triplet_manifest_names(tmp_path: Path) -> None:
    d = _triplet_dir(tmp_path, A64, names=UNIT_NAMES)
    table = neuroneval.score(d, C64, ["cosine"])
    assert table["unit"].to_list() == [u for u in UNIT_NAMES for _ in range(T)]


def test_shard_manifest_concept_names(tmp_path: Path) -> None:
    d = write_shards(tmp_path / "cs", [C64[:10], C64[10:]], names=CONCEPT_NAMES)
    table = neuroneval.score(A64, d, ["correlation"])
    assert table["concept"].to_list() == CONCEPT_NAMES * K
    assert table["unit"].to_list() == [u for u in range(K) for _ in range(T)]


def test_manifest_with_wrong_number_of_names(tmp_path: Path) -> None:
    d = write_shards(tmp_path / "s", [A64])
    manifest = json.loads((d / MANIFEST).read_text())
    manifest["names"] = UNIT_NAMES[:-1]
    (d / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(errors.SourceError, match="names"):
        open_activations(d)
    with pytest.raises(errors.ShapeError):
        open_activations(write_shards(tmp_path / "t", [A64]), unit_names=UNIT_NAMES[:3])


# ---------------------------------------------------------------------------------------------
# Errors: class and a fragment of the message.
# ---------------------------------------------------------------------------------------------


def expect(cls: type[Exception], *fragments: str, call: Callable[[], Any]) -> str:
    with pytest.raises(cls) as info:
        call()
    message = str(info.value)
    assert isinstance(info.value, errors.NeuronEvalError) and isinstance(info.value, ValueError)
    for f in fragments:
        assert f.lower() in message.lower(), (f, message)
    return message


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.npy"
    expect(errors.SourceError, "nope.npy does not exist", call=lambda: neuroneval.compute(missing, C64))
    expect(errors.SourceError, "nope.npy does not exist", call=lambda: neuroneval.compute(A64, missing))
    expect(errors.SourceError, "nope.csv does not exist", call=lambda: neuroneval.compute(A64, tmp_path / "nope.csv"))
    d = write_shards(tmp_path / "s", [A64[:5], A64[5:]])
    (d / "shard-00001.npy").unlink()
    expect(errors.SourceError, "shard-00001.npy", "does not exist", call=lambda: open_activations(d))


def test_corrupt_and_truncated_npy(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(bytes(range(256)) * 8)
    expect(errors.SourceError, "garbage.npy", call=lambda: open_activations(garbage))
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    expect(errors.SourceError, "empty.npy", call=lambda: open_activations(empty))
    truncated = tmp_path / "truncated.npy"
    np.save(truncated, A64)
    data = truncated.read_bytes()
    header = len(data) - A64.nbytes
    truncated.write_bytes(data[: header + A64.nbytes // 2])
    expect(errors.SourceError, "truncated", call=lambda: neuroneval.compute(truncated, C64))
    # A truncated shard in a shard directory is caught the same way.
    d = write_shards(tmp_path / "s", [A64[:500], A64[500:]])
    shard = d / "shard-00001.npy"
    shard.write_bytes(shard.read_bytes()[:-8])
    expect(errors.SourceError, "shard-00001.npy", call=lambda: open_activations(d))


def test_three_dimensional_npy(tmp_path: Path) -> None:
    path = _npy(tmp_path, np.zeros((4, 3, 2)), "cube.npy")
    expect(errors.ShapeError, "(4, 3, 2)", call=lambda: open_activations(path))
    vec = _npy(tmp_path, np.zeros(4), "vec.npy")
    expect(errors.ShapeError, "vec.npy", call=lambda: open_activations(vec))


def test_not_a_source(tmp_path: Path) -> None:
    text = tmp_path / "acts.txt"
    text.write_text("1 2 3\n")
    expect(errors.SourceError, "acts.txt", call=lambda: open_activations(text))
    d = tmp_path / "plain-dir"
    d.mkdir()
    np.save(d / "shard-00000.npy", A64)
    expect(errors.SourceError, MANIFEST, call=lambda: open_activations(d))


def _edit_manifest(d: Path, **changes: Any) -> None:
    manifest = json.loads((d / MANIFEST).read_text())
    manifest.update(changes)
    (d / MANIFEST).write_text(json.dumps(manifest))


def test_bad_manifests(tmp_path: Path) -> None:
    d = write_shards(tmp_path / "a", [A64[:3], A64[3:]])
    _edit_manifest(d, format="numpy-shards")
    expect(errors.SourceError, "format", call=lambda: open_activations(d))
    d = write_shards(tmp_path / "b", [A64[:3], A64[3:]])
    (d / MANIFEST).write_text("{not json")
    expect(errors.SourceError, "json", call=lambda: open_activations(d))
    d = write_shards(tmp_path / "c", [A64[:3], A64[3:]])
    _edit_manifest(d, layout="columns")
    expect(errors.SourceError, "columns", call=lambda: open_activations(d))
    d = write_shards(tmp_path / "d", [A64[:3], A64[3:]])
    manifest = json.loads((d / MANIFEST).read_text())
    del manifest["n_rows"]
    (d / MANIFEST).write_text(json.dumps(manifest))
    expect(errors.SourceError, "n_rows", call=lambda: open_activations(d))


def test_shards_disagreeing_with_each_other_or_the_manifest(tmp_path: Path) -> None:
    # Columns: write_shards refuses; a shard replaced afterwards is caught when opened.
    expect(errors.ShapeError, "columns", call=lambda: write_shards(tmp_path / "w", [A64[:3], A64[3:, :4]]))
    d = write_shards(tmp_path / "a", [A64[:3], A64[3:]])
    np.save(d / "shard-00001.npy", A64[3:, :4])
    expect(errors.ShapeError, "shard-00001.npy", call=lambda: open_activations(d))
    # Dtypes: one float32 shard among float64 ones.
    d = write_shards(tmp_path / "b", [A64[:3], A64[3:].astype(np.float32)])
    expect(errors.DTypeError, "float32", call=lambda: open_activations(d))
    # Rows: the manifest says more (or fewer) rows than the shards hold.
    for n_rows in (N + 1, N - 1):
        d = write_shards(tmp_path / f"rows{n_rows}", [A64[:3], A64[3:]])
        _edit_manifest(d, n_rows=n_rows)
        expect(errors.ShapeError, str(n_rows), call=lambda d=d: open_activations(d))
    # Columns in the manifest disagreeing with every shard.
    d = write_shards(tmp_path / "cols", [A64[:3], A64[3:]])
    _edit_manifest(d, n_columns=K + 1)
    expect(errors.ShapeError, str(K + 1), call=lambda: open_activations(d))


def _hand_triplets(tmp: Path, rows: list[int], cols: list[int], values: list[float], n: int = 10, k: int = 12) -> Path:
    d = tmp / "trip"
    d.mkdir(parents=True)
    half = len(rows) // 2
    for i, (lo, hi) in enumerate(((0, half), (half, len(rows)))):
        np.savez(
            d / f"t-{i}.npz",
            row=np.array(rows[lo:hi], dtype=np.int64),
            column=np.array(cols[lo:hi], dtype=np.int64),
            value=np.array(values[lo:hi], dtype=np.float64),
        )
    manifest = {
        "format": "neuroneval-shards",
        "version": 1,
        "layout": "triplets",
        "n_rows": n,
        "n_columns": k,
        "shards": [{"file": "t-0.npz"}, {"file": "t-1.npz"}],
    }
    (d / MANIFEST).write_text(json.dumps(manifest))
    return d


def test_triplet_errors(tmp_path: Path) -> None:
    c = np.ones((10, 1)) * 0.5
    # The same entry in two different files.
    d = _hand_triplets(tmp_path / "dup", [1, 4, 7, 4], [2, 3, 0, 3], [1.0, 2.0, 3.0, 4.0])
    expect(errors.ShapeError, "row 4", "column 3", call=lambda: open_activations(d))
    # Out of range, each index, each side.
    for rows, cols, what in (([1, 10], [0, 0], "10"), ([1, -1], [0, 0], "-1"), ([1, 2], [0, 12], "12")):
        d = _hand_triplets(tmp_path / f"range{what}{len(cols)}{cols[1]}", rows, cols, [1.0, 2.0])
        expect(errors.ShapeError, what, call=lambda d=d: open_activations(d))
    # A shard without the `column` array.
    d = _hand_triplets(tmp_path / "key", [1, 2], [0, 1], [1.0, 2.0])
    np.savez(d / "t-1.npz", row=np.array([2]), col=np.array([1]), value=np.array([2.0]))
    expect(errors.SourceError, "t-1.npz", call=lambda: open_activations(d))
    # NaN: the error names the first bad entry in row-major order, (2, 7), although (5, 3)
    # comes first by column and first in the files.
    d = _hand_triplets(tmp_path / "nan", [5, 8, 2, 2], [3, 0, 9, 7], [np.nan, 1.0, np.inf, np.nan])
    expect(errors.NonFiniteError, "row 2", "column 7", call=lambda: neuroneval.compute(d, c, ["auc"]))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_nan_in_sparse_activations_names_first_in_row_major_order(fmt: str) -> None:
    a = sp.lil_matrix((40, 9))
    a[30, 1] = np.nan  # first by column
    a[12, 8] = np.nan  # first by row: the one to name
    a[12, 5] = 0.25
    a[20, 2] = np.inf
    m = a.asformat(fmt)
    c = np.ones((40, 2)) * 0.5
    expect(errors.NonFiniteError, "row 12", "column 8", call=lambda: neuroneval.compute(m, c, ["auc"]))
    dense = a.toarray()
    expect(errors.NonFiniteError, "row 12", "column 8", call=lambda: neuroneval.compute(dense, c, ["auc"]))


def test_nan_in_a_later_shard_names_the_global_row(tmp_path: Path) -> None:
    a = A64.copy()
    a[103, 2] = np.nan
    a[150, 1] = np.nan
    d = write_shards(tmp_path / "s", [a[:100], a[100:]])
    expect(errors.NonFiniteError, "row 103", "column 2", call=lambda: neuroneval.compute(d, C64, ["auc"]))


def test_bad_concept_tables(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"

    def write(df: dict[str, list[Any]]) -> Path:
        pl.DataFrame(df).write_csv(path)
        return path

    a = A64[:5]
    for missing in ("input", "concept"):
        df: dict[str, list[Any]] = {"input": [0, 1], "concept": ["a", "b"], "probability": [1.0, 0.5]}
        del df[missing]
        write(df)
        expect(errors.SourceError, "column", missing, call=lambda: neuroneval.compute(a, path))
    write({"input": [0, 5], "concept": ["a", "b"], "probability": [1.0, 0.5]})
    expect(errors.ShapeError, "5", call=lambda: neuroneval.compute(a, path))
    write({"input": [0, 3, 3], "concept": ["a", "b", "b"], "probability": [1.0, 0.5, 0.5]})
    expect(errors.ShapeError, "more than once", call=lambda: neuroneval.compute(a, path))
    write({"input": [0, 1], "concept": ["a", None], "probability": [1.0, 0.5]})
    expect(errors.SourceError, "empty", call=lambda: neuroneval.compute(a, path))
    write({"input": [0, 1], "concept": ["a", "b"], "probability": ["high", "low"]})
    expect(errors.SourceError, "probability", call=lambda: neuroneval.compute(a, path))
    write({"input": [0, 1], "concept": ["a", "b"], "probability": [1.5, 0.5]})
    expect(errors.ConceptRangeError, "row 0", call=lambda: neuroneval.compute(a, path))
    pq = tmp_path / "c.parquet"
    pq.write_bytes(b"PAR1 but not really")
    expect(errors.SourceError, "c.parquet", call=lambda: neuroneval.compute(a, pq))
    expect(errors.ShapeError, "n_inputs", call=lambda: open_concepts(path))


def test_concept_table_without_a_value_column_names_probability(tmp_path: Path) -> None:
    """A table with neither `probability` nor `label`: the error must name the documented
    column, `probability` (not only the fallback `label`)."""
    path = tmp_path / "c.csv"
    pl.DataFrame({"input": [0, 1], "concept": ["a", "b"]}).write_csv(path)
    expect(errors.SourceError, "column", "probability", call=lambda: neuroneval.compute(A64[:5], path))


def test_fractional_input_index_in_concept_table(tmp_path: Path) -> None:
    """`input` must hold integers: 1.5 is not a row, and must not silently become row 1."""
    path = tmp_path / "c.csv"
    pl.DataFrame({"input": [0.0, 1.5], "concept": ["a", "a"], "probability": [1.0, 1.0]}).write_csv(path)
    expect(errors.SourceError, "input", call=lambda: neuroneval.compute(A64[:3], path, ["auc"]))


def test_write_triplet_shards_round_trips(tmp_path: Path) -> None:
    """Triplets split over shards in an arbitrary order (and an empty shard) read back as
    the matrix they came from, scores included; the unit arrays are named "unit"."""
    rows, cols = np.nonzero(A64)
    order = np.random.default_rng(3).permutation(len(rows))
    rows, cols = rows[order], cols[order]
    values = A64[rows, cols]
    cut = len(rows) // 3
    shards = [(rows[:cut], cols[:cut], values[:cut]), ([], [], []), (rows[cut:], cols[cut:], values[cut:])]
    d = write_triplet_shards(tmp_path / "t", shards, shape=A64.shape, names=UNIT_NAMES)
    with np.load(d / "shard-00000.npz") as z:
        assert sorted(z.files) == ["row", "unit", "value"]
    src = open_activations(d)
    assert (src.kind, src.shape, src.names) == ("sparse", A64.shape, UNIT_NAMES)
    got = neuroneval.compute(d, C64)
    want = neuroneval.compute(A64, C64)
    for m in neuroneval.METRICS:
        np.testing.assert_allclose(got[m], want[m], rtol=0, atol=1e-12, equal_nan=True, err_msg=m)
    with pytest.raises(errors.ShapeError, match="one length"):
        write_triplet_shards(tmp_path / "bad", [([0, 1], [0], [1.0, 2.0])], shape=(3, 2))

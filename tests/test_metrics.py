"""Every metric of SPEC sections 2-3 against slow, literal references written here.

The references loop over (unit, concept) pairs, binarise exactly as SPEC section 2 says and
lean on scikit-learn (ROC AUC, average precision) and scipy (Pearson, midranks), so they share
no code with the library. `compute` must equal them to 1e-10 with NaN in the same places.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
import sklearn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from neuroneval import metrics as nm
from numpy.testing import assert_allclose
from scipy import stats
from sklearn.metrics import average_precision_score as sk_ap
from sklearn.metrics import roc_auc_score as sk_auc

METRICS = list(neuroneval.METRICS)
TOP_RANDOM = ("correlation_top_random", "spearman_top_random")
DETERMINISTIC = [m for m in METRICS if m not in TOP_RANDOM]
UNIT_RANGE = [m for m in METRICS if neuroneval.METRICS[m].value_range == (0.0, 1.0)]
SIGNED_RANGE = [m for m in METRICS if neuroneval.METRICS[m].value_range == (-1.0, 1.0)]
COMBINATIONS = {
    "combined_auc": ("auc", "inverse_auc"),
    "combined_balanced_accuracy": ("balanced_accuracy", "inverse_balanced_accuracy"),
    "recall_auc": ("recall", "auc"),
    "recall_inverse_auc": ("recall", "inverse_auc"),
    "precision_balanced_accuracy": ("precision", "balanced_accuracy"),
    "precision_inverse_balanced_accuracy": ("precision", "inverse_balanced_accuracy"),
}
TOL = {"rtol": 1e-10, "atol": 1e-10}


def test_metric_list_is_the_spec_list() -> None:
    assert len(METRICS) == 24
    assert set(DETERMINISTIC) == set(REFERENCE_FUNCS) | set(COMBINATIONS)
    assert set(UNIT_RANGE) | set(SIGNED_RANGE) | {"wpmi", "mad"} == set(METRICS)


# ---------------------------------------------------------------------------------------------
# The slow reference (SPEC sections 2 and 3, literally).
# ---------------------------------------------------------------------------------------------


def ref_n_top(alpha: float, n: int) -> int:
    return max(1, math.ceil(alpha * n))


def ref_binarise(a: np.ndarray, alpha: float) -> np.ndarray:
    n_top = ref_n_top(alpha, len(a))
    cut = sorted(a.tolist(), reverse=True)[n_top - 1]
    return np.array([1.0 if v >= cut else 0.0 for v in a])


def _div(x: float, d: float) -> float:
    return math.nan if d == 0 else x / d


def _is_constant(x: np.ndarray) -> bool:
    return bool(np.all(x == x[0]))


def ref_pearson(x: np.ndarray, y: np.ndarray) -> float:
    if _is_constant(x) or _is_constant(y):
        return math.nan
    return float(stats.pearsonr(x, y)[0])


def ref_spearman(x: np.ndarray, y: np.ndarray) -> float:
    return ref_pearson(stats.rankdata(x), stats.rankdata(y))


def ref_cosine(x: np.ndarray, y: np.ndarray) -> float:
    nx, ny = math.sqrt(sum(v * v for v in x)), math.sqrt(sum(v * v for v in y))
    return _div(float(np.dot(x, y)), nx * ny)


# scikit-learn calls dominate the reference's time; the same (label, score) vectors recur
# across alphas and units (inverse metrics do not depend on alpha), so remember them.
_SK_CACHE: dict[tuple[str, bytes, bytes], float] = {}


def _sklearn(which: str, label: np.ndarray, score: np.ndarray) -> float:
    label = np.ascontiguousarray(label, dtype=np.float64)
    score = np.ascontiguousarray(score, dtype=np.float64)
    key = (which, label.tobytes(), score.tobytes())
    if key not in _SK_CACHE:
        fn = sk_auc if which == "auc" else sk_ap
        with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
            _SK_CACHE[key] = float(fn(label, score))
    return _SK_CACHE[key]


def ref_auc(label: np.ndarray, score: np.ndarray) -> float:
    if label.min() == label.max():
        return math.nan
    return _sklearn("auc", label, score)


def ref_ap(label: np.ndarray, score: np.ndarray) -> float:
    if label.sum() == 0:
        return math.nan
    return _sklearn("ap", label, score)


def ref_harmonic(x: float, y: float) -> float:
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.float64(2.0 * x * y) / np.float64(x + y))


def ref_pair(a: np.ndarray, c: np.ndarray, alpha: float, lam: float) -> dict[str, float]:
    n = len(a)
    b = ref_binarise(a, alpha)
    y = np.array([1.0 if v >= 0.5 else 0.0 for v in c])
    tp = sum(1 for i in range(n) if b[i] == 1 and y[i] == 1)
    fp = sum(1 for i in range(n) if b[i] == 1 and y[i] == 0)
    fn = sum(1 for i in range(n) if b[i] == 0 and y[i] == 1)
    tn = n - tp - fp - fn
    nb, ny = tp + fp, tp + fn
    out = {
        "recall": _div(tp, nb),
        "precision": _div(tp, ny),
        "f1": _div(2 * tp, 2 * tp + fp + fn),
        "iou": _div(tp, nb + ny - tp),
        "accuracy": (tp + tn) / n,
        "balanced_accuracy": (_div(tp, nb) + _div(tn, n - nb)) / 2,
        "inverse_balanced_accuracy": (_div(tp, ny) + _div(tn, n - ny)) / 2,
        "auc": ref_auc(b, c),
        "inverse_auc": ref_auc(y, a),
        "auprc": ref_ap(b, c),
        "inverse_auprc": ref_ap(y, a),
        "correlation": ref_pearson(a, c),
        "spearman": ref_spearman(a, c),
        "cosine": ref_cosine(a, c),
    }
    mean_c = sum(c) / n
    if mean_c == 0:
        out["wpmi"] = math.nan
    else:
        logs = [math.log(max(c[i], 1e-8)) for i in range(n) if b[i] == 1]
        out["wpmi"] = sum(logs) / len(logs) - lam * math.log(mean_c)
    if ny in (0, n):
        out["mad"] = math.nan
    else:
        out["mad"] = float(np.mean(a[y == 1]) - np.mean(a[y == 0]))
    for name, (x, z) in COMBINATIONS.items():
        out[name] = ref_harmonic(out[x], out[z])
    return out


REFERENCE_FUNCS = [
    "recall",
    "precision",
    "f1",
    "iou",
    "accuracy",
    "balanced_accuracy",
    "inverse_balanced_accuracy",
    "auc",
    "inverse_auc",
    "auprc",
    "inverse_auprc",
    "correlation",
    "spearman",
    "cosine",
    "wpmi",
    "mad",
]


def reference(acts: np.ndarray, conc: np.ndarray, alpha: float, lam: float = 1.0) -> dict[str, np.ndarray]:
    """Every deterministic metric as a (K, T) array, one pair at a time (float64 inputs)."""
    acts = np.asarray(acts, dtype=np.float64)
    conc = np.asarray(conc, dtype=np.float64)
    k_units, t_concepts = acts.shape[1], conc.shape[1]
    out = {m: np.empty((k_units, t_concepts)) for m in DETERMINISTIC}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(k_units):
            for t in range(t_concepts):
                for m, v in ref_pair(acts[:, k], conc[:, t], alpha, lam).items():
                    out[m][k, t] = v
    return out


def assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], context: str = "") -> None:
    for m in DETERMINISTIC:
        assert got[m].dtype == np.float64, m
        assert got[m].shape == ref[m].shape, m
        nan_got, nan_ref = np.isnan(got[m]), np.isnan(ref[m])
        if not np.array_equal(nan_got, nan_ref):
            where = np.argwhere(nan_got != nan_ref)[:5].tolist()
            raise AssertionError(
                f"{context} {m}: NaN positions differ at (unit, concept) {where}: "
                f"got {[got[m][tuple(i)] for i in where]}, expected {[ref[m][tuple(i)] for i in where]}"
            )
        assert_allclose(got[m], ref[m], err_msg=f"{context} {m}", **TOL)


# ---------------------------------------------------------------------------------------------
# SPEC section 3 reference values.
# ---------------------------------------------------------------------------------------------

from spec_values import A0, A1, C0, C1, SPEC_A, SPEC_ALPHA, SPEC_C, SPEC_PLAIN  # noqa: E402, F401


def _spec_value(name: str, alpha: float) -> np.ndarray:
    if name in SPEC_ALPHA:
        return np.array(SPEC_ALPHA[name][alpha], dtype=np.float64)
    return np.array(SPEC_PLAIN[name], dtype=np.float64)


@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_spec_reference_values(alpha: float) -> None:
    got = neuroneval.compute(SPEC_A, SPEC_C, alpha=alpha)
    for name in [*SPEC_ALPHA, *SPEC_PLAIN]:
        assert_allclose(got[name], _spec_value(name, alpha), rtol=0, atol=1e-6, err_msg=name)
    for name, (x, y) in COMBINATIONS.items():
        vx, vy = _spec_value(x, alpha), _spec_value(y, alpha)
        expected = 2 * vx * vy / (vx + vy)
        assert_allclose(got[name], expected, rtol=0, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_spec_example_matches_slow_reference(alpha: float) -> None:
    assert_matches(neuroneval.compute(SPEC_A, SPEC_C, alpha=alpha), reference(SPEC_A, SPEC_C, alpha))


@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_metric_functions_equal_compute(alpha: float) -> None:
    got = neuroneval.compute(SPEC_A, SPEC_C, alpha=alpha, lam=0.3, k=3, top_alpha=0.4, seed=5)
    for name in METRICS:
        info = neuroneval.METRICS[name]
        fn = getattr(nm, name)
        if info.uses_sampling:
            value = fn(SPEC_A, SPEC_C, alpha=0.4, k=3, seed=5)
        elif info.uses_lambda:
            value = fn(SPEC_A, SPEC_C, alpha=alpha, lam=0.3)
        elif info.uses_alpha:
            value = fn(SPEC_A, SPEC_C, alpha=alpha)
        else:
            value = fn(SPEC_A, SPEC_C)
        np.testing.assert_array_equal(value, got[name], err_msg=name)


def test_wpmi_lambda_is_applied() -> None:
    for lam in (0.0, 0.37, 1.0, 2.5):
        got = neuroneval.compute(SPEC_A, SPEC_C, ["wpmi"], alpha=0.2, lam=lam)["wpmi"]
        assert_allclose(got, reference(SPEC_A, SPEC_C, 0.2, lam)["wpmi"], **TOL)


def test_alpha_uses_ieee_product_then_ceil() -> None:
    # 0.07 * 100 = 7.000000000000001 in doubles, so n_top is 8, not 7 (SPEC section 2).
    n = 100
    a = np.arange(n, 0, -1, dtype=np.float64)[:, None]  # distinct values, input i is rank i
    c = np.zeros((n, 1))
    c[:8] = 1.0
    assert ref_n_top(0.07, n) == 8
    got = neuroneval.compute(a, c, ["recall", "precision"], alpha=0.07)
    assert got["recall"][0, 0] == 1.0  # |b| = 8, all in the concept
    assert got["precision"][0, 0] == 1.0


# ---------------------------------------------------------------------------------------------
# Adversarial data against the slow reference, in the sparse and the dense concept regimes.
# ---------------------------------------------------------------------------------------------

N_ADV = 400


def _adversarial_units(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = [
        rng.integers(0, 4, n).astype(np.float64),  # heavy ties
        np.zeros(n),  # all-zero unit
        np.full(n, 0.1),  # constant, not exactly representable
        np.where(rng.random(n) < 0.05, rng.exponential(1.0, n), 0.0),  # SAE-like: cut inside zeros
        np.where(rng.random(n) < 0.06, rng.exponential(1.0, n), 0.0)
        - np.where(rng.random(n) < 0.1, rng.exponential(1.0, n), 0.0),  # zeros with a few negatives
        rng.normal(size=n),
        -np.abs(rng.normal(size=n)) - 3.0,  # all negative
        rng.choice([0.0, 0.5, 1.0], n, p=[0.5, 0.3, 0.2]),
    ]
    return np.column_stack(cols)


def _sparse_concepts(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t_concepts = 40
    c = np.zeros((n, t_concepts))
    for t in range(t_concepts):
        idx = rng.choice(n, size=max(1, n // 100), replace=False)
        if t % 4 == 0:
            c[idx, t] = 1.0
        elif t % 4 == 1:
            c[idx, t] = rng.random(idx.size)
        elif t % 4 == 2:
            c[idx, t] = 0.5
        else:
            c[idx, t] = rng.choice([0.25, 0.5, 0.75, 1.0], idx.size)
    c[:, 3] = 0.0  # empty concept
    c[:, 5] = 1.0  # full concept (1/40 of the entries: the matrix stays sparse)
    c[:, 7] = 0.0
    c[0, 7] = 1.0  # a single positive
    return c


def _dense_concepts(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = [
        (rng.random(n) < 0.3).astype(np.float64),
        rng.random(n),  # soft uniform
        np.where(rng.random(n) < 0.5, 0.5, 0.0),  # exactly 0.5: labelled positive
        np.zeros(n),  # empty
        np.ones(n),  # full
        rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], n),
        (rng.random(n) < 0.02).astype(np.float64),
        np.full(n, 0.5),  # constant at the label threshold
        np.full(n, 0.3),  # constant, all labelled 0, nonzero mean
    ]
    return np.column_stack(cols)


def _density(c: np.ndarray) -> float:
    return float(np.count_nonzero(c) / c.size)


DATA: dict[str, tuple[np.ndarray, np.ndarray]] = {
    "sparse": (_adversarial_units(N_ADV, 1), _sparse_concepts(N_ADV, 2)),
    "dense": (_adversarial_units(N_ADV, 3), _dense_concepts(N_ADV, 4)),
}


def test_regimes_are_as_intended() -> None:
    assert _density(DATA["sparse"][1]) < 0.05
    assert _density(DATA["dense"][1]) > 0.05


@functools.cache
def _cached_reference(regime: str, alpha: float) -> dict[str, np.ndarray]:
    a, c = DATA[regime]
    return reference(a, c, alpha)


ALPHAS = [0.005, 0.07, 0.2, 1.0]


@pytest.mark.parametrize("regime", ["sparse", "dense"])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_adversarial_matches_reference(regime: str, alpha: float) -> None:
    a, c = DATA[regime]
    got = neuroneval.compute(a, c, alpha=alpha)
    assert_matches(got, _cached_reference(regime, alpha), f"{regime} alpha={alpha}")


def test_sae_unit_cut_inside_zero_tie_group() -> None:
    a, c = DATA["dense"]
    sae = a[:, 3]
    n_top = ref_n_top(0.2, N_ADV)
    assert np.count_nonzero(sae > 0) < n_top  # the cut is 0, inside the zero group
    b = ref_binarise(sae, 0.2)
    assert b.sum() > n_top
    # recall against the full concept counts every binarised input: TP = |b|.
    got = neuroneval.compute(a[:, [3, 4]], c, ["recall", "accuracy"], alpha=0.2)
    assert got["recall"][0, 4] == 1.0
    neg = a[:, 4]
    assert ref_binarise(neg, 0.2).sum() == np.count_nonzero(neg >= 0)
    assert got["accuracy"][1, 4] == np.count_nonzero(neg >= 0) / N_ADV


@pytest.mark.parametrize("regime", ["sparse", "dense"])
def test_layouts_match_reference(regime: str) -> None:
    a, c = DATA[regime]
    ref = _cached_reference(regime, 0.2)
    views = {
        "fortran": (np.asfortranarray(a), slice(None)),
        "transposed copy": (a.T.copy().T, slice(None)),
        "every other column": (a[:, ::2], slice(None, None, 2)),
        "columns 1:": (a[::1, 1:], slice(1, None)),
    }
    for label, (view, cols) in views.items():
        got = neuroneval.compute(view, c, alpha=0.2)
        assert_matches(got, {m: v[cols] for m, v in ref.items()}, f"{regime} {label}")
    got = neuroneval.compute(a, np.asfortranarray(c[:, ::-1]), alpha=0.2)
    assert_matches(got, {m: v[:, ::-1] for m, v in ref.items()}, f"{regime} reversed concepts")


def test_big_endian_float64_is_float64() -> None:
    # SPEC section 1: float64 input is accepted; byte order is a storage detail.
    a, c = SPEC_A, SPEC_C
    got = neuroneval.compute(a.astype(">f8"), c.astype(">f8"), alpha=0.2)
    expected = neuroneval.compute(a, c, alpha=0.2)
    for m in METRICS:
        np.testing.assert_array_equal(got[m], expected[m], err_msg=m)


@pytest.mark.parametrize("regime", ["sparse", "dense"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_narrow_floats_match_reference_on_widened_values(regime: str, dtype: Any) -> None:
    a, c = DATA[regime]
    a_n, c_n = a[:, ::2].astype(dtype), c[:, ::3].astype(dtype)
    got = neuroneval.compute(a_n, c_n, alpha=0.2)
    assert_matches(got, reference(a_n.astype(np.float64), c_n.astype(np.float64), 0.2), f"{regime} {dtype}")


@pytest.mark.parametrize("torch_dtype", ["float32", "bfloat16", "float64"])
def test_torch_tensors_match_reference(torch_dtype: str) -> None:
    torch = pytest.importorskip("torch")
    a, c = DATA["dense"]
    dt = getattr(torch, torch_dtype)
    ta, tc = torch.from_numpy(a[:, :5].copy()).to(dt), torch.from_numpy(c[:, :5].copy()).to(dt)
    wa, wc = ta.to(torch.float64).numpy(), tc.to(torch.float64).numpy()
    got = neuroneval.compute(ta, tc, alpha=0.2)
    assert_matches(got, reference(wa, wc, 0.2), torch_dtype)
    # A transposed (non-contiguous) tensor view.
    got_t = neuroneval.compute(ta.T.contiguous().T, tc, alpha=0.2)
    for m in METRICS:
        np.testing.assert_array_equal(got_t[m], got[m], err_msg=m)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("alpha", [0.3, 0.5, 1.0])
def test_tiny_n(n: int, alpha: float) -> None:
    rng = np.random.default_rng(n)
    a = np.column_stack([rng.normal(size=n), np.zeros(n), np.arange(n, dtype=float)])
    c = np.column_stack([np.ones(n), np.zeros(n), (np.arange(n) % 2).astype(float), np.full(n, 0.5)])
    if n >= 2:
        c[0, 3] = 0.2
    got = neuroneval.compute(a, c, alpha=alpha)
    assert_matches(got, reference(a, c, alpha), f"N={n}")
    for m in TOP_RANDOM:
        assert got[m].shape == (3, 4)


# ---------------------------------------------------------------------------------------------
# pairs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("regime", ["sparse", "dense"])
def test_pairs_equal_matrix_entries(regime: str) -> None:
    a, c = DATA[regime]
    kw = {"alpha": 0.07, "lam": 0.5, "k": 7, "top_alpha": 0.05, "seed": 11}
    full = neuroneval.compute(a, c, **kw)
    rng = np.random.default_rng(0)
    pairs = np.column_stack([rng.integers(0, a.shape[1], 60), rng.integers(0, c.shape[1], 60)])
    pairs = np.concatenate([pairs, pairs[:5], [[0, 0], [0, 0], [a.shape[1] - 1, c.shape[1] - 1]]])
    got = neuroneval.compute(a, c, pairs=pairs, **kw)
    for m in METRICS:
        assert got[m].shape == (len(pairs),), m
        expected = full[m][pairs[:, 0], pairs[:, 1]]
        assert_allclose(got[m], expected, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=m)
        assert np.array_equal(np.isnan(got[m]), np.isnan(expected)), m
    # Reversed order gives reversed results.
    rev = neuroneval.compute(a, c, pairs=pairs[::-1], **kw)
    for m in METRICS:
        np.testing.assert_array_equal(rev[m], got[m][::-1], err_msg=m)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
@pytest.mark.parametrize("regime", ["sparse", "dense"])
def test_a_pair_alone_equals_the_pair_among_others_bit_for_bit(regime: str, layout: str, dtype: type) -> None:
    """A call that names one unit (the compat drop-ins' pattern) copies its column and sums it
    in one pass where the column is contiguous (column-major here), else copies then sums; a
    call that names several units sums each copy apart. Both give the same bits, for every
    dtype, and the matrix call's values."""
    a, c = DATA[regime]
    a = a.astype(dtype, order="C" if layout == "row-major" else "F")
    kw = {"alpha": 0.07, "lam": 0.5, "k": 7, "top_alpha": 0.05, "seed": 11}
    full = neuroneval.compute(a, c, **kw)
    last = a.shape[1] - 1
    for k, t in [(0, 0), (last, c.shape[1] - 1), (1, c.shape[1] // 2)]:
        alone = neuroneval.compute(a, c, pairs=[[k, t]], **kw)
        among = neuroneval.compute(a, c, pairs=[[k, t], [last - k, t]], **kw)
        for m in METRICS:
            assert np.array_equal(alone[m], among[m][:1], equal_nan=True), (m, k, t)
            assert_allclose(alone[m], full[m][k : k + 1, t], rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=m)


def test_pairs_as_lists_and_subset_of_metrics() -> None:
    got = neuroneval.compute(SPEC_A, SPEC_C, ["auc", "correlation"], alpha=0.2, pairs=[[1, 0], [0, 1], [1, 0]])
    full = neuroneval.compute(SPEC_A, SPEC_C, ["auc", "correlation"], alpha=0.2)
    assert list(got) == ["auc", "correlation"]
    for m in got:
        assert_allclose(got[m], [full[m][1, 0], full[m][0, 1], full[m][1, 0]], rtol=1e-12, atol=1e-12)


def test_empty_pairs() -> None:
    for empty in (np.zeros((0, 2), dtype=np.int64), [], np.zeros((0,), dtype=np.int64)):
        got = neuroneval.compute(SPEC_A, SPEC_C, alpha=0.2, pairs=empty)
        assert set(got) == set(METRICS)
        for v in got.values():
            assert v.shape == (0,) and v.dtype == np.float64


# ---------------------------------------------------------------------------------------------
# Top-random metrics
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("regime", ["sparse", "dense"])
def test_top_random_whole_dataset_equals_full_correlation(regime: str) -> None:
    a, c = DATA[regime]
    a, c = a[:80], c[:80]
    got = neuroneval.compute(a, c, alpha=0.2, k=80, top_alpha=1.0, seed=3)
    big_k = neuroneval.compute(a, c, alpha=0.2, k=10_000, top_alpha=1.0, seed=9)
    ref = reference(a, c, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doubled_corr = np.array(
            [
                [ref_pearson(np.r_[a[:, k], a[:, k]], np.r_[c[:, t], c[:, t]]) for t in range(c.shape[1])]
                for k in range(a.shape[1])
            ]
        )
        doubled_spear = np.array(
            [
                [ref_spearman(np.r_[a[:, k], a[:, k]], np.r_[c[:, t], c[:, t]]) for t in range(c.shape[1])]
                for k in range(a.shape[1])
            ]
        )
    for res in (got, big_k):
        assert_allclose(res["correlation_top_random"], doubled_corr, equal_nan=True, **TOL)
        assert_allclose(res["correlation_top_random"], ref["correlation"], equal_nan=True, **TOL)
        assert_allclose(res["spearman_top_random"], doubled_spear, equal_nan=True, **TOL)
        assert_allclose(res["spearman_top_random"], ref["spearman"], equal_nan=True, **TOL)


def test_top_random_seeded() -> None:
    a, c = DATA["dense"]
    kw = {"k": 10, "top_alpha": 0.05}
    m = list(TOP_RANDOM)
    r1 = neuroneval.compute(a, c, m, seed=1, **kw)
    r1b = neuroneval.compute(a, c, m, seed=1, **kw)
    r2 = neuroneval.compute(a, c, m, seed=2, **kw)
    for name in m:
        assert np.array_equal(r1[name], r1b[name], equal_nan=True), name
        assert not np.array_equal(r1[name], r2[name], equal_nan=True), name
        vals = r1[name][~np.isnan(r1[name])]
        assert vals.size > 0
        assert np.all((vals >= -1) & (vals <= 1)), name
    # The other metrics do not depend on the seed, and asking for them does not move the draw.
    with_all = neuroneval.compute(a, c, seed=1, **kw)
    for name in m:
        assert np.array_equal(with_all[name], r1[name], equal_nan=True), name


def test_top_random_subset_is_per_unit() -> None:
    # SPEC: each unit draws its own subset, so two copies of one unit draw different subsets.
    a, c = DATA["dense"]
    twin = np.column_stack([a[:, 5], a[:, 5]])
    got = neuroneval.compute(twin, c[:, :3], list(TOP_RANDOM), k=5, top_alpha=0.1, seed=4)
    for name in TOP_RANDOM:
        assert not np.array_equal(got[name][0], got[name][1], equal_nan=True), name
    again = neuroneval.compute(twin.copy(), c[:, :3].copy(), list(TOP_RANDOM), k=5, top_alpha=0.1, seed=4)
    for name in TOP_RANDOM:
        assert np.array_equal(got[name], again[name], equal_nan=True), name


# ---------------------------------------------------------------------------------------------
# ROC AUC / average precision drop-ins and meta-AUPRC
# ---------------------------------------------------------------------------------------------


@st.composite
def labelled_scores(draw: Any) -> tuple[list[int], list[int]]:
    n = draw(st.integers(1, 40))
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    scores = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    return labels, scores


@settings(max_examples=150, deadline=None)
@given(labelled_scores())
def test_roc_auc_and_ap_equal_sklearn(data: tuple[list[int], list[int]]) -> None:
    labels, scores = data
    y, s = np.array(labels), np.array(scores, dtype=np.float64)
    got_auc = nm.roc_auc_score(y, s)
    got_ap = nm.average_precision_score(y, s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp_auc, exp_ap = ref_auc(y, s), ref_ap(y, s)
    assert isinstance(got_auc, float) and isinstance(got_ap, float)
    assert (math.isnan(got_auc) and math.isnan(exp_auc)) or abs(got_auc - exp_auc) <= 1e-12
    assert (math.isnan(got_ap) and math.isnan(exp_ap)) or abs(got_ap - exp_ap) <= 1e-12
    # bool labels and list inputs give the same.
    assert np.array_equal(nm.roc_auc_score(y.astype(bool), scores), got_auc, equal_nan=True)
    assert np.array_equal(nm.average_precision_score(y.astype(bool).tolist(), s), got_ap, equal_nan=True)


def test_roc_auc_ap_known_values() -> None:
    assert nm.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75, abs=1e-12)
    assert nm.roc_auc_score([0, 1], [1.0, 1.0]) == 0.5
    assert math.isnan(nm.roc_auc_score([1, 1, 1], [0.1, 0.2, 0.3]))
    assert math.isnan(nm.roc_auc_score([0, 0], [0.1, 0.2]))
    assert math.isnan(nm.average_precision_score([0, 0, 0], [0.1, 0.2, 0.3]))
    assert nm.average_precision_score([1, 1], [0.5, 0.5]) == 1.0
    # Closed form of SPEC section 3 with binary scores: AP = (TP/P)(TP/|y|) + (1 - TP/P)(P/N).
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = 30
        label = (rng.random(n) < 0.4).astype(float)
        score = (rng.random(n) < 0.5).astype(float)
        if label.sum() == 0 or score.sum() == 0:
            continue
        p, tp, ny = label.sum(), (label * score).sum(), score.sum()
        expected = (tp / p) * (tp / ny) + (1 - tp / p) * (p / n)
        assert nm.average_precision_score(label, score) == pytest.approx(expected, abs=1e-12)


def test_columns_versions_equal_loop() -> None:
    rng = np.random.default_rng(8)
    n, m = 50, 12
    y = (rng.random((n, m)) < 0.3).astype(np.float64)
    y[:, 0] = 0.0
    y[:, 1] = 1.0
    s = rng.integers(0, 4, (n, m)).astype(np.float64)
    auc_cols = nm.roc_auc_score_columns(y, s)
    ap_cols = nm.average_precision_score_columns(y, s)
    assert auc_cols.shape == ap_cols.shape == (m,)
    auc_loop = np.array([nm.roc_auc_score(y[:, j], s[:, j]) for j in range(m)])
    ap_loop = np.array([nm.average_precision_score(y[:, j], s[:, j]) for j in range(m)])
    assert np.array_equal(auc_cols, auc_loop, equal_nan=True)
    assert np.array_equal(ap_cols, ap_loop, equal_nan=True)
    assert math.isnan(auc_cols[0]) and math.isnan(auc_cols[1]) and math.isnan(ap_cols[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_allclose(auc_cols, [ref_auc(y[:, j], s[:, j]) for j in range(m)], rtol=0, atol=1e-12, equal_nan=True)
        assert_allclose(ap_cols, [ref_ap(y[:, j], s[:, j]) for j in range(m)], rtol=0, atol=1e-12, equal_nan=True)
    # bool labels and float32 scores.
    assert np.array_equal(nm.roc_auc_score_columns(y.astype(bool), s.astype(np.float32)), auc_cols, equal_nan=True)


def _ref_meta_auprc(scores: np.ndarray, truth: np.ndarray) -> float:
    flat = scores.reshape(-1).copy()
    nan = np.isnan(flat)
    floor = flat[~nan].min() - 1.0 if (~nan).any() else 0.0
    flat[nan] = floor
    return float(sk_ap(truth.reshape(-1), flat))


@pytest.mark.parametrize("seed", range(5))
def test_meta_auprc_equals_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k_units, t_concepts = 15, 9
    scores = rng.integers(0, 5, (k_units, t_concepts)).astype(np.float64) / 4
    scores[rng.random(scores.shape) < 0.2] = np.nan
    truth_idx = rng.integers(0, t_concepts, k_units)
    truth = np.zeros((k_units, t_concepts), dtype=bool)
    truth[np.arange(k_units), truth_idx] = True
    res = neuroneval.meta_auprc(scores, truth_idx)
    assert res.value == pytest.approx(_ref_meta_auprc(scores, truth), abs=1e-12)
    assert res.nan_scores == int(np.isnan(scores).sum())
    assert res.pairs == k_units * t_concepts
    assert neuroneval.meta_auprc(scores, truth).value == res.value
    assert float(res) == res.value


def test_meta_auprc_nan_ranks_lowest() -> None:
    # A NaN score on the true pair must rank below every number, even negative ones.
    scores = np.array([[np.nan, -5.0], [-3.0, -9.0]])
    res = neuroneval.meta_auprc(scores, np.array([0, 0]))
    # Ranking: -3 (pos), -5 (neg), -9 (neg), NaN (pos) -> AP = 1/2 * 1 + 1/2 * 2/4.
    assert res.value == pytest.approx(0.75, abs=1e-12)
    assert res.nan_scores == 1


def test_meta_auprc_nan_below_extreme_scores() -> None:
    # NaN must still rank below the most negative float and no two distinct scores may tie,
    # however close to the float limits they are.
    scores = np.array([[1e300, -1e300], [np.nan, 5.0], [-1.7e308, 2.0]])
    truth = np.array([0, 1, 0])
    y = np.zeros(scores.shape, dtype=bool)
    y[np.arange(3), truth] = True
    # The same order in small numbers: the rank of each score, NaN below rank 0.
    ranks = stats.rankdata(np.where(np.isnan(scores), -np.inf, scores).ravel(), method="min")
    expected = sk_ap(y.ravel(), ranks)
    assert neuroneval.meta_auprc(scores, truth).value == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# score(): the polars table
# ---------------------------------------------------------------------------------------------


def test_score_table_layout() -> None:
    a = np.column_stack([SPEC_A, SPEC_A[:, 0] ** 2])
    table = neuroneval.score(a, SPEC_C, alpha=0.2)
    full = neuroneval.compute(a, SPEC_C, alpha=0.2)
    assert isinstance(table, pl.DataFrame)
    assert table.columns == ["unit", "concept", *METRICS]
    assert table.height == 3 * 2
    assert table["unit"].to_list() == [0, 0, 1, 1, 2, 2]
    assert table["concept"].to_list() == [0, 1, 0, 1, 0, 1]
    for m in METRICS:
        assert table.schema[m] == pl.Float64, m
        assert np.array_equal(table[m].to_numpy(), full[m].reshape(-1), equal_nan=True), m


def test_score_names_and_metric_subset() -> None:
    table = neuroneval.score(
        SPEC_A, SPEC_C, ["iou", "correlation"], alpha=0.5, unit_names=["u0", "u1"], concept_names=["dog", 7]
    )
    assert table.columns == ["unit", "concept", "iou", "correlation"]
    assert table.schema["unit"] == pl.String and table.schema["concept"] == pl.String
    assert table["unit"].to_list() == ["u0", "u0", "u1", "u1"]
    assert table["concept"].to_list() == ["dog", "7", "dog", "7"]
    assert_allclose(table["iou"].to_numpy(), [0.5, 0.285714, 0.125, 0.5], atol=1e-6)


def test_score_with_pairs_follows_pairs() -> None:
    pairs = np.array([[1, 1], [0, 0], [1, 0], [1, 1]])
    table = neuroneval.score(SPEC_A, SPEC_C, ["auc"], alpha=0.2, pairs=pairs, unit_names=["a", "b"])
    assert table.height == 4
    assert table["unit"].to_list() == ["b", "a", "b", "b"]
    assert table["concept"].to_list() == [1, 0, 0, 1]
    full = neuroneval.compute(SPEC_A, SPEC_C, ["auc"], alpha=0.2)["auc"]
    assert_allclose(table["auc"].to_numpy(), full[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Extreme magnitudes: finite inputs must not overflow into a wrong answer.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-170, 1e170])
def test_correlation_and_cosine_scale_invariant(scale: float) -> None:
    a = np.array([[1.0, 2.0, 3.0, 5.0]]).T
    c = np.array([[1.0, 0.0, 1.0, 1.0]]).T
    base = neuroneval.compute(a, c, ["correlation", "cosine", "spearman"])
    scaled = neuroneval.compute(a * scale, c, ["correlation", "cosine", "spearman"])
    for m in base:
        assert_allclose(scaled[m], base[m], rtol=1e-10, err_msg=f"{m} at scale {scale}")


def test_correlation_with_tiny_concept_probabilities() -> None:
    # A soft concept from a sigmoid can hold values like exp(-450); c = [0, 8e-198] is not
    # constant, so its Pearson r with a = [-2, -0.5] is exactly 1 (scipy agrees), not NaN.
    a = np.array([[-2.0], [-0.5], [-1.0]])
    c = np.array([[0.0], [8.12161423e-198], [4.0e-198]])
    got = neuroneval.compute(a, c, ["correlation", "cosine"])
    assert_allclose(got["correlation"], [[ref_pearson(a[:, 0], c[:, 0])]], rtol=1e-10)
    assert_allclose(got["cosine"], [[ref_cosine(a[:, 0] * 1e-100, c[:, 0] * 1e100)]], rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# Hypothesis: ranges and the reference on small random inputs.
# ---------------------------------------------------------------------------------------------

ACT_VALUES = [-2.0, -0.5, 0.0, 0.0, 0.25, 1.0, 1.0, 3.0]
SOFT_VALUES = [0.0, 0.0, 0.2, 0.5, 0.7, 1.0]


@st.composite
def small_problem(draw: Any) -> tuple[np.ndarray, np.ndarray, float]:
    n = draw(st.integers(1, 40))
    k_units = draw(st.integers(1, 4))
    t_concepts = draw(st.integers(1, 3))
    a = np.array(draw(st.lists(st.sampled_from(ACT_VALUES), min_size=n * k_units, max_size=n * k_units)))
    a = a.reshape(n, k_units)
    kind = draw(st.sampled_from(["binary", "soft", "float"]))
    size = n * t_concepts
    if kind == "binary":
        c = np.array(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=size, max_size=size)))
    elif kind == "soft":
        c = np.array(draw(st.lists(st.sampled_from(SOFT_VALUES), min_size=size, max_size=size)))
    else:
        # Probabilities at realistic magnitudes; tiny ones are pinned by the extreme-magnitude tests.
        prob = st.one_of(st.just(0.0), st.floats(1e-12, 1.0))
        c = np.array(draw(st.lists(prob, min_size=size, max_size=size)))
    alpha = draw(
        st.one_of(
            st.floats(0.0, 1.0, exclude_min=True, allow_subnormal=False),
            st.sampled_from([1.0, 0.5, 0.07, 0.1, 1 / 3]),
        )
    )
    return a, c.reshape(n, t_concepts), alpha


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problem())
def test_property_ranges_and_reference(problem: tuple[np.ndarray, np.ndarray, float]) -> None:
    a, c, alpha = problem
    got = neuroneval.compute(a, c, alpha=alpha, k=3, top_alpha=0.3, seed=1)
    for m in UNIT_RANGE:
        v = got[m][~np.isnan(got[m])]
        assert np.all((v >= 0) & (v <= 1)), (m, v)
    for m in SIGNED_RANGE:
        v = got[m][~np.isnan(got[m])]
        assert np.all((v >= -1) & (v <= 1)), (m, v)
    assert_matches(got, reference(a, c, alpha), f"alpha={alpha!r}")
    # The paired path agrees on the full list of pairs.
    pairs = np.array([(k, t) for k in range(a.shape[1]) for t in range(c.shape[1])])
    paired = neuroneval.compute(a, c, alpha=alpha, k=3, top_alpha=0.3, seed=1, pairs=pairs)
    for m in METRICS:
        assert_allclose(paired[m], got[m].reshape(-1), rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=m)

"""neuroneval.compat.neuron_eval: the reference's names and signatures, SPEC section 3's numbers."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from neuroneval.compat import neuron_eval as ne
from neuroneval.errors import ParameterError, ShapeError
from numpy.testing import assert_allclose
from spec_values import A0, A1, C0, C1, SPEC_ALPHA, SPEC_PLAIN  # noqa: E402

A = np.column_stack([A0, A1]).astype(np.float64)
C = np.column_stack([C0, C1]).astype(np.float64)
N = A.shape[0]

# The reference's names of the metrics SPEC section 3 lists values for.
COMPAT_NAME = {"f1": "f1_score", "spearman": "spearman_correlation", "cosine": "cos_sim"}
# compat name -> {alpha: [[a0:c0, a0:c1], [a1:c0, a1:c1]]}
ALPHA_REF: dict[str, dict[float, list[list[float]]]] = {COMPAT_NAME.get(m, m): v for m, v in SPEC_ALPHA.items()}
PLAIN_REF: dict[str, list[list[float]]] = {COMPAT_NAME.get(m, m): v for m, v in SPEC_PLAIN.items()}


def _h(x: Any, y: Any) -> Any:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return 2 * x * y / (x + y)


def _combined_ref(alpha: float) -> dict[str, Any]:
    r = {name: np.array(v[alpha]) for name, v in ALPHA_REF.items()}
    inv_auc = np.array(PLAIN_REF["inverse_auc"])
    return {
        "combined_auc": _h(r["auc"], inv_auc),
        "combined_balanced_acc": _h(r["balanced_accuracy"], r["inverse_balanced_accuracy"]),
        "recall_auc": _h(r["recall"], r["auc"]),
        "recall_inv_auc": _h(r["recall"], inv_auc),
        "precision_bal_acc": _h(r["precision"], r["balanced_accuracy"]),
        "precision_inverse_bal_acc": _h(r["precision"], r["inverse_balanced_accuracy"]),
    }


COMBINED = list(_combined_ref(0.2))
ALPHA_NAMES = list(ALPHA_REF) + COMBINED
PLAIN_NAMES = list(PLAIN_REF)
TOP_RANDOM_NAMES = ["correlation_top_and_random", "spearman_correlation_top_and_random"]
BINARY_TOP_RANDOM_NAMES = [name + "_binary" for name in TOP_RANDOM_NAMES]
# The variants for binary units are checked in test_compat_reference.py.
GENERIC_NAMES = ALPHA_NAMES + PLAIN_NAMES + TOP_RANDOM_NAMES
ALL_NAMES = GENERIC_NAMES + BINARY_TOP_RANDOM_NAMES


def _expected(name: str, alpha: float = 0.5) -> Any:
    if name in ALPHA_REF:
        return np.array(ALPHA_REF[name][alpha])
    if name in COMBINED:
        return _combined_ref(alpha)[name]
    return np.array(PLAIN_REF[name])


def _call(name: str, a: Any, c: Any, alpha: float = 0.5, **kw: Any) -> Any:
    """Call a compat function the way the reference is called (alpha positional where it takes one)."""
    fn: Callable[..., Any] = getattr(ne, name)
    if name in ALPHA_NAMES:
        return fn(a, c, alpha, **kw)
    if name in TOP_RANDOM_NAMES:
        # k >= N and alpha = 1: both halves are all N inputs, so the subset is every input twice.
        return fn(a, c, N, 1.0, **kw)
    return fn(a, c, **kw)


def _expected_any(name: str, alpha: float = 0.5) -> Any:
    if name == "correlation_top_and_random":
        return np.array(PLAIN_REF["correlation"])
    if name == "spearman_correlation_top_and_random":
        return np.array(PLAIN_REF["spearman_correlation"])
    return _expected(name, alpha)


# --- SPEC section 3 reference values --------------------------------------------------------


def test_every_reference_function_is_offered() -> None:
    assert sorted(ne.__all__) == sorted(ALL_NAMES)
    for name in ALL_NAMES:
        fn = getattr(ne, name)
        assert fn.__doc__ and "Parameters" in fn.__doc__


@pytest.mark.parametrize("alpha", [0.2, 0.5])
@pytest.mark.parametrize("name", ALPHA_NAMES)
def test_alpha_metrics_match_spec(name: str, alpha: float) -> None:
    got = getattr(ne, name)(A, C, alpha)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (2, 2)
    assert_allclose(got, _expected(name, alpha), atol=1e-6)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_metrics_match_spec(name: str) -> None:
    got = getattr(ne, name)(A, C)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (2, 2)
    assert_allclose(got, _expected(name), atol=1e-6)


def test_alpha_is_keyword_too_and_iou_defaults_like_the_reference() -> None:
    assert_allclose(ne.recall(A, C, alpha=0.2), ALPHA_REF["recall"][0.2], atol=1e-12)
    # The reference's iou defaults alpha to 0.01: ceil(0.01 * 10) = 1 top input.
    assert_allclose(ne.iou(A, C), ne.iou(A, C, 0.1), atol=0)


def test_wpmi_lambda() -> None:
    assert_allclose(ne.wpmi(A, C, 0.2, 1), ALPHA_REF["wpmi"][0.2], atol=1e-6)
    # lam = 0: the mean log-probability of the concept over the unit's top inputs.
    b0 = np.array(A0) >= np.sort(A0)[-2]
    expected = np.mean(np.log(np.maximum(np.array(C1)[b0], 1e-8)))
    assert_allclose(ne.wpmi(A0, C1, 0.2, lam=0), expected, rtol=1e-12)


def test_top_and_random_with_every_input_equals_the_full_metric() -> None:
    assert_allclose(ne.correlation_top_and_random(A, C, N, 1.0), PLAIN_REF["correlation"], atol=1e-6)
    assert_allclose(ne.spearman_correlation_top_and_random(A, C, N, 1.0), PLAIN_REF["spearman_correlation"], atol=1e-6)


def test_top_and_random_defaults_on_a_small_set() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    # N = 10, alpha = 0.002, k = 25: the single top input, plus all 10 inputs (k > N).
    a, c = np.array(A0), np.array(C1)
    subset = np.r_[np.arange(N), np.argmax(a)]
    assert_allclose(ne.correlation_top_and_random(a, c), scipy_stats.pearsonr(a[subset], c[subset])[0], rtol=1e-12)
    assert_allclose(
        ne.spearman_correlation_top_and_random(a, c), scipy_stats.spearmanr(a[subset], c[subset])[0], rtol=1e-12
    )


def test_top_and_random_is_seeded() -> None:
    rng = np.random.default_rng(3)
    a, c = rng.normal(size=(500, 3)), rng.random((500, 4))
    first = ne.correlation_top_and_random(a, c, 10, 0.1, seed=7)
    assert_allclose(ne.correlation_top_and_random(a, c, 10, 0.1, seed=7), first, atol=0)
    assert not np.allclose(ne.correlation_top_and_random(a, c, 10, 0.1, seed=8), first)
    square = c[:, :3]
    for name in TOP_RANDOM_NAMES:
        fn = getattr(ne, name)
        full = fn(a, square, 10, 0.1, seed=7)
        assert_allclose(fn(a, square, 10, 0.1, seed=7, paired=True), np.diag(full), atol=0)


# --- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GENERIC_NAMES)
def test_one_dimensional_inputs_give_a_scalar(name: str) -> None:
    expected = _expected_any(name)
    for k, a in enumerate((A0, A1)):
        for t, c in enumerate((C0, C1)):
            got = _call(name, np.array(a), np.array(c))
            assert isinstance(got, np.float64) and isinstance(got, float)
            assert got == pytest.approx(expected[k, t], abs=1e-6)


@pytest.mark.parametrize("name", GENERIC_NAMES)
def test_one_dimensional_side_drops_its_axis(name: str) -> None:
    expected = _expected_any(name)
    got = _call(name, A[:, 1], C)
    assert got.shape == (2,)
    assert_allclose(got, expected[1], atol=1e-6)
    got = _call(name, A, C[:, 0])
    assert got.shape == (2,)
    assert_allclose(got, expected[:, 0], atol=1e-6)


@pytest.mark.parametrize("name", GENERIC_NAMES)
def test_paired_scores_column_by_column(name: str) -> None:
    expected = _expected_any(name)
    got = _call(name, A, C, paired=True)
    assert isinstance(got, np.ndarray) and got.shape == (2,)
    assert_allclose(got, np.diag(expected), atol=1e-6)
    swapped = _call(name, A, C[:, ::-1], paired=True)
    assert_allclose(swapped, [expected[0, 1], expected[1, 0]], atol=1e-6)
    scalar = _call(name, A[:, 0], C[:, 1], paired=True)
    assert isinstance(scalar, np.float64)
    assert scalar == pytest.approx(expected[0, 1], abs=1e-6)


def test_paired_needs_equal_shapes() -> None:
    with pytest.raises(ShapeError, match="same shape"):
        ne.recall(A, C[:, :1], 0.5, paired=True)
    with pytest.raises(ShapeError, match="same shape"):
        ne.correlation(A[:, 0], C, paired=True)


def test_rectangular_matrix_is_unit_by_concept() -> None:
    c3 = np.column_stack([C, 1 - C[:, 0]])
    got = ne.recall(A, c3, 0.5)
    assert got.shape == (2, 3)
    assert_allclose(got[:, :2], ALPHA_REF["recall"][0.5], atol=1e-12)


def test_bad_rank_is_rejected() -> None:
    with pytest.raises(ShapeError, match="1-D"):
        ne.correlation(A[None], C)
    with pytest.raises(ShapeError, match="1-D"):
        ne.correlation(A, np.float64(1.0))


def test_lists_in_numpy_out() -> None:
    got = ne.auc([list(r) for r in A], [list(r) for r in C], 0.2)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    assert_allclose(got, ALPHA_REF["auc"][0.2], atol=1e-6)
    assert isinstance(ne.mad(A0, C0), np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_numpy_out_is_float64_whatever_the_input(dtype: Any) -> None:
    got = ne.cos_sim(A.astype(dtype), C.astype(dtype) if dtype != np.int64 else C)
    assert got.dtype == np.float64


# --- documented differences from the reference ------------------------------------------------


def test_reference_scaling_multiplies_by_n_minus_one_over_n() -> None:
    plain = ne.correlation(A, C)
    scaled = ne.correlation(A, C, reference_scaling=True)
    assert_allclose(scaled, plain * (N - 1) / N, rtol=1e-14)
    # The reference's own formula: mean-centre, divide by the sample std, then divide by N.
    za = (A - A.mean(0)) / A.std(0, ddof=1)
    zc = (C - C.mean(0)) / C.std(0, ddof=1)
    assert_allclose(scaled, za.T @ zc / N, rtol=1e-12)
    one = ne.correlation(A0, C1, reference_scaling=True)
    assert isinstance(one, np.float64)
    assert one == pytest.approx(PLAIN_REF["correlation"][0][1] * 0.9, abs=1e-6)
    assert_allclose(ne.correlation(A, C, reference_scaling=True, paired=True), np.diag(scaled), rtol=1e-14)


def test_undefined_is_nan_where_the_reference_clamps() -> None:
    empty = np.zeros(N)
    assert math.isnan(ne.precision(A0, empty, 0.2))  # the reference: 0
    assert math.isnan(ne.inverse_auc(A0, empty))  # the reference: 0
    assert math.isnan(ne.correlation(np.ones(N), C1))  # the reference: 0
    assert math.isnan(ne.wpmi(A0, empty, 0.2))  # the reference: +inf


def test_alpha_outside_its_domain_names_false_as_the_way_to_skip_binarising() -> None:
    for bad in (0, 0.0, True, 1.5):
        with pytest.raises(ParameterError, match="alpha"):
            ne.recall(A, C, bad)


# --- independent check against scikit-learn and scipy, on data with ties -----------------------


def _top_alpha(a: Any, alpha: float) -> Any:
    """SPEC section 2, written out: the ceil(alpha N)-th largest value is the cut; ties included."""
    n_top = max(1, math.ceil(alpha * len(a)))
    return (a >= np.sort(a)[::-1][n_top - 1]).astype(int)


@pytest.fixture(scope="module")
def tied() -> tuple[Any, Any]:
    rng = np.random.default_rng(20250101)
    n = 300
    acts = np.round(rng.gamma(2.0, 1.0, size=(n, 3)), 1)  # many ties
    acts[:, 2] = rng.integers(0, 5, size=n)  # ties at the top-alpha cut: |b| > ceil(alpha N)
    concepts = np.round(rng.random((n, 4)) * 4) / 4  # 0, 0.25, 0.5 (a positive), 0.75, 1
    concepts[:, 3] = (acts[:, 0] > 2.5) * 0.5 + 0.25 * (rng.random(n) > 0.5)
    return acts, concepts


def test_against_sklearn_and_scipy(tied: tuple[Any, Any]) -> None:
    sk = pytest.importorskip("sklearn.metrics")
    stats = pytest.importorskip("scipy.stats")
    acts, concepts = tied
    alpha = 0.05
    assert any(_top_alpha(acts[:, k], alpha).sum() > math.ceil(alpha * len(acts)) for k in range(3))
    got = {
        name: getattr(ne, name)(acts, concepts, alpha)
        for name in ["auc", "auprc", "recall", "precision", "f1_score", "iou", "accuracy", "balanced_accuracy"]
        + ["inverse_balanced_accuracy", "combined_auc", "recall_inv_auc"]
    }
    got |= {name: getattr(ne, name)(acts, concepts) for name in ["inverse_auc", "inverse_auprc"]}
    got |= {name: getattr(ne, name)(acts, concepts) for name in ["correlation", "spearman_correlation", "cos_sim"]}
    got["mad"] = ne.mad(acts, concepts)
    for k in range(acts.shape[1]):
        a = acts[:, k]
        b = _top_alpha(a, alpha)
        for t in range(concepts.shape[1]):
            c = concepts[:, t]
            y = (c >= 0.5).astype(int)
            auc = sk.roc_auc_score(b, c)
            inv_auc = sk.roc_auc_score(y, a)
            recall = sk.recall_score(b, y)
            want = {
                "auc": auc,
                "auprc": sk.average_precision_score(b, c),
                "inverse_auc": inv_auc,
                "inverse_auprc": sk.average_precision_score(y, a),
                "recall": recall,
                "precision": sk.precision_score(b, y, zero_division=np.nan),
                "f1_score": sk.f1_score(b, y),
                "iou": sk.jaccard_score(b, y),
                "accuracy": sk.accuracy_score(b, y),
                "balanced_accuracy": sk.balanced_accuracy_score(b, y),
                "inverse_balanced_accuracy": sk.balanced_accuracy_score(y, b),
                "combined_auc": _h(auc, inv_auc),
                "recall_inv_auc": _h(recall, inv_auc),
                "correlation": stats.pearsonr(a, c)[0],
                "spearman_correlation": stats.spearmanr(a, c)[0],
                "cos_sim": a @ c / (np.linalg.norm(a) * np.linalg.norm(c)),
                "mad": a[y == 1].mean() - a[y == 0].mean(),
            }
            for name, value in want.items():
                assert got[name][k, t] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, k, t)


def test_wpmi_against_numpy(tied: tuple[Any, Any]) -> None:
    acts, concepts = tied
    concepts = np.where(concepts == 0, 0.1, concepts)
    got = ne.wpmi(acts, concepts, 0.05, 0.5)
    for k in range(acts.shape[1]):
        b = _top_alpha(acts[:, k], 0.05).astype(bool)
        for t in range(concepts.shape[1]):
            c = concepts[:, t]
            assert got[k, t] == pytest.approx(np.log(c[b]).mean() - 0.5 * np.log(c.mean()), rel=1e-12)


# --- torch in, torch out ------------------------------------------------------------------------


@pytest.mark.parametrize("name", GENERIC_NAMES)
def test_torch_in_torch_out(name: str) -> None:
    torch = pytest.importorskip("torch")
    a, c = torch.from_numpy(A), torch.from_numpy(C)
    got = _call(name, a, c)
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float64 and got.device == a.device and got.shape == (2, 2)
    assert_allclose(got.numpy(), _expected_any(name), atol=1e-6)
    one = _call(name, a[:, 0], c[:, 1])
    assert isinstance(one, torch.Tensor) and one.shape == () and one.device == a.device
    assert float(one) == pytest.approx(_expected_any(name)[0, 1], abs=1e-6)
    paired = _call(name, a, c, paired=True)
    assert isinstance(paired, torch.Tensor) and paired.shape == (2,)


def test_torch_dtypes() -> None:
    torch = pytest.importorskip("torch")
    a32, c32 = torch.from_numpy(A).float(), torch.from_numpy(C).float()
    got = ne.correlation(a32, c32)
    assert got.dtype == torch.float32
    assert_allclose(got.numpy(), PLAIN_REF["correlation"], atol=1e-6)
    assert ne.correlation(a32, c32.double()).dtype == torch.float64
    assert ne.correlation(a32.half(), c32.half()).dtype == torch.float64
    assert ne.correlation(a32.bfloat16(), c32).dtype == torch.float64
    # Non-floating tensors do not decide the dtype.
    assert ne.recall(a32, torch.from_numpy(C[:, :1] >= 0.5), 0.5).dtype == torch.float32
    # One tensor among the inputs is enough for a tensor result.
    mixed = ne.auprc(A, c32, 0.2)
    assert isinstance(mixed, torch.Tensor) and mixed.dtype == torch.float32
    assert_allclose(mixed.numpy(), ALPHA_REF["auprc"][0.2], atol=1e-6)


def test_torch_gradients_do_not_block() -> None:
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(A).requires_grad_(True)
    got = ne.cos_sim(a, torch.from_numpy(C))
    assert not got.requires_grad
    assert_allclose(got.numpy(), PLAIN_REF["cos_sim"], atol=1e-6)


def test_torch_same_device_on_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a, c = torch.from_numpy(A).cuda(), torch.from_numpy(C).cuda()
    got = ne.iou(a, c, 0.5)
    assert got.device == a.device
    assert_allclose(got.cpu().numpy(), ALPHA_REF["iou"][0.5], atol=1e-6)


def test_import_does_not_import_torch() -> None:
    code = "import sys, neuroneval.compat.neuron_eval; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

"""Every input error by class and by message: SPEC section 1 asks for clear errors that name the
column and row, and the library promises that each is a ValueError and a NeuronEvalError."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import neuroneval
import numpy as np
import pytest
from neuroneval import errors
from neuroneval import metrics as nm

RNG = np.random.default_rng(0)
A = RNG.random((8, 3))
C = (RNG.random((8, 2)) < 0.5).astype(np.float64)


def check(call: Callable[[], Any], cls: type[Exception], *fragments: str) -> str:
    """`call` raises exactly `cls` (a ValueError and NeuronEvalError) whose message holds every fragment."""
    with pytest.raises(cls) as info:
        call()
    err = info.value
    assert isinstance(err, ValueError), type(err)
    assert isinstance(err, neuroneval.NeuronEvalError), type(err)
    assert isinstance(err, errors.InvalidInputError), type(err)
    assert type(err).__module__ == "neuroneval.errors"
    message = str(err)
    for fragment in fragments:
        assert fragment.lower() in message.lower(), (fragment, message)
    return message


def test_hierarchy() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, neuroneval.NeuronEvalError)
        if name == "OutputWriteError":  # a full disk is not bad input: an OSError
            assert issubclass(cls, OSError) and not issubclass(cls, ValueError)
        elif name != "NeuronEvalError":
            assert issubclass(cls, ValueError), name
    assert neuroneval.NeuronEvalError is errors.NeuronEvalError


# --- shapes ------------------------------------------------------------------------------------


def test_mismatched_rows() -> None:
    check(lambda: neuroneval.compute(A, C[:5]), errors.ShapeError, "8", "5")
    check(lambda: neuroneval.score(A[:3], C), errors.ShapeError, "3", "8")
    check(lambda: nm.correlation(A, C[:7]), errors.ShapeError, "8", "7")


@pytest.mark.parametrize(
    "acts, conc",
    [
        (A[:, 0], C),
        (A, C[:, 0]),
        (A[None], C),
        (A, C[None]),
        (np.float64(1.0), C),
    ],
)
def test_wrong_rank(acts: Any, conc: Any) -> None:
    check(lambda: neuroneval.compute(acts, conc), errors.ShapeError, "2-D")


def test_one_dimensional_hint() -> None:
    msg = check(lambda: neuroneval.compute(A[:, 0], C), errors.ShapeError, "(8,)")
    assert "[:, None]" in msg


@pytest.mark.parametrize(
    "a_shape, c_shape",
    [((0, 3), (0, 2)), ((0, 5), (0, 5)), ((5, 0), (5, 2)), ((5, 2), (5, 0)), ((0, 0), (0, 0))],
)
def test_empty_inputs(a_shape: tuple[int, int], c_shape: tuple[int, int]) -> None:
    acts, conc = np.zeros(a_shape), np.zeros(c_shape)
    check(lambda: neuroneval.compute(acts, conc), errors.EmptyInputError, "empty")
    check(lambda: neuroneval.score(acts, conc), errors.EmptyInputError, "empty")
    check(lambda: nm.auc(acts, conc, alpha=0.5), errors.EmptyInputError, "empty")


def test_no_metric_requested() -> None:
    check(lambda: neuroneval.compute(A, C, []), errors.EmptyInputError, "metric")


def test_empty_label_vectors() -> None:
    check(lambda: nm.roc_auc_score([], []), errors.EmptyInputError)
    check(lambda: nm.average_precision_score([], []), errors.EmptyInputError)


def test_label_score_length_mismatch() -> None:
    check(lambda: nm.roc_auc_score([0, 1, 1], [0.1, 0.2]), errors.ShapeError, "3", "2")
    check(
        lambda: nm.average_precision_score_columns(np.zeros((3, 2)), np.zeros((3, 3))),
        errors.ShapeError,
    )


def test_name_list_lengths() -> None:
    check(lambda: neuroneval.score(A, C, unit_names=["a"]), errors.ShapeError, "unit_names", "1", "3")
    check(lambda: neuroneval.score(A, C, concept_names=["a", "b", "c"]), errors.ShapeError, "concept_names")


# --- non-finite values and concept range -------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_non_finite_activations(bad: float, dtype: Any) -> None:
    a = A.astype(dtype)
    a[3, 1] = bad
    msg = check(lambda: neuroneval.compute(a, C), errors.NonFiniteError, "activations", "row 3", "column 1")
    assert not re.search(r"row 3\d", msg) and not re.search(r"column 1\d", msg)


def test_non_finite_activations_in_a_view() -> None:
    # Row and column refer to the array the caller passed, not to an internal copy.
    big = np.zeros((10, 6))
    big[5, 4] = np.nan
    view = big[1:, ::2]  # row 5 -> 4, column 4 -> 2
    check(lambda: neuroneval.compute(view, np.ones((9, 1))), errors.NonFiniteError, "row 4", "column 2")
    check(lambda: neuroneval.compute(big.T.copy().T, np.ones((10, 1))), errors.NonFiniteError, "row 5", "column 4")


@pytest.mark.parametrize("bad", [[np.inf], [np.nan], [-np.inf], [np.inf, -np.inf], [-np.inf, np.nan]])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_finite_with_pairs(bad: list[float], dtype: Any) -> None:
    # A pair call finds a unit's non-finite values from its sum; +inf and -inf together sum to NaN.
    # The first in row order is named, whatever follows it.
    a = np.tile(A, (3, 1)).astype(dtype)  # 24 rows: values in several of the sum's lanes
    for j, value in enumerate(bad):
        a[6 + 9 * j, 2] = value
    c = np.tile(C, (3, 1))
    for pairs in ([[2, 0]], [[2, 0], [2, 1]]):
        msg = check(lambda p=pairs: neuroneval.compute(a, c, pairs=p), errors.NonFiniteError, "row 6", "column 2")
        assert "row 15" not in msg


def test_a_pair_whose_finite_values_overflow_their_sum_is_scored_as_in_a_matrix() -> None:
    # 1e308 eight rows apart lands in one lane of the sum, which overflows: a finite unit all
    # the same, scored as the matrix call scores it.
    a = np.tile(A, (3, 1))
    a[::8, 1] = 1e308
    c = np.tile(C, (3, 1))
    metrics = ["correlation", "cosine", "mad", "spearman", "auc", "inverse_auprc"]
    matrix = neuroneval.compute(a, c, metrics)
    for t in range(c.shape[1]):
        pair = neuroneval.compute(a, c, metrics, pairs=[[1, t]])
        for m in metrics:
            assert np.array_equal(pair[m], matrix[m][1:2, t], equal_nan=True), (m, t)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_concepts(bad: float) -> None:
    c = C.copy()
    c[2, 1] = bad
    check(lambda: neuroneval.compute(A, c), errors.NonFiniteError, "concepts", "row 2", "column 1")
    check(lambda: neuroneval.compute(A, c, pairs=[[0, 1]]), errors.NonFiniteError, "concepts", "row 2", "column 1")


@pytest.mark.parametrize("value", [1.5, -0.1, 1.0000001, -1e-300])
def test_concept_out_of_range(value: float) -> None:
    c = C.copy()
    c[4, 1] = value
    check(lambda: neuroneval.compute(A, c), errors.ConceptRangeError, "row 4", "column 1")
    check(lambda: neuroneval.compute(A, c, pairs=[[0, 1]]), errors.ConceptRangeError, "row 4", "column 1")


def test_concept_range_first_column() -> None:
    c = C.copy()
    c[0, 0] = -0.1
    check(lambda: neuroneval.score(A, c), errors.ConceptRangeError, "row 0", "column 0", "-0.1")


def test_non_finite_scores_in_rank_statistics() -> None:
    check(lambda: nm.roc_auc_score([0, 1, 1], [0.1, np.nan, 0.3]), errors.NonFiniteError, "row 1")
    check(lambda: nm.average_precision_score([0, 1, 1], [0.1, 0.2, np.inf]), errors.NonFiniteError, "row 2")


# --- parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan"), float("inf"), -0.0])
def test_bad_alpha(alpha: float) -> None:
    check(lambda: neuroneval.compute(A, C, alpha=alpha), errors.ParameterError, "alpha")
    check(lambda: neuroneval.compute(A, C, alpha=alpha, pairs=[[0, 0]]), errors.ParameterError, "alpha")
    check(lambda: nm.iou(A, C, alpha=alpha), errors.ParameterError, "alpha")


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan")])
def test_bad_top_random_alpha(alpha: float) -> None:
    check(lambda: neuroneval.compute(A, C, top_alpha=alpha), errors.ParameterError, "alpha")
    check(lambda: nm.correlation_top_random(A, C, alpha=alpha), errors.ParameterError, "alpha")


@pytest.mark.parametrize("lam", [-1.0, -1e-12, float("nan"), float("inf")])
def test_bad_lambda(lam: float) -> None:
    check(lambda: neuroneval.compute(A, C, lam=lam), errors.ParameterError, "lambda")
    check(lambda: neuroneval.compute(A, C, ["wpmi"], lam=lam, pairs=[[0, 0]]), errors.ParameterError, "lambda")
    check(lambda: nm.wpmi(A, C, lam=lam), errors.ParameterError, "lambda")


@pytest.mark.parametrize("k", [0, -1, -(2**40)])
def test_bad_k(k: int) -> None:
    check(lambda: neuroneval.compute(A, C, k=k), errors.ParameterError, "k")
    check(lambda: nm.spearman_top_random(A, C, k=k), errors.ParameterError, "k")


def test_huge_k_is_a_parameter_error() -> None:
    # k beyond what the core can hold must be reported as bad input, not as a bare OverflowError.
    check(lambda: neuroneval.compute(A, C, k=2**70), errors.ParameterError, "k")


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_bad_seed(seed: Any) -> None:
    check(lambda: neuroneval.compute(A, C, seed=seed), errors.ParameterError, "seed")


# --- pairs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pairs, fragments",
    [
        ([[0, 0], [3, 0]], ("pair 1", "(3, 0)", "3 units", "2 concepts")),
        ([[0, 2]], ("pair 0", "(0, 2)")),
        ([[-1, 0]], ("pair 0", "-1")),
        ([[0, -1]], ("-1",)),
        ([[2**62, 0]], (str(2**62),)),
    ],
)
def test_pairs_out_of_range(pairs: list[list[int]], fragments: tuple[str, ...]) -> None:
    check(lambda: neuroneval.compute(A, C, pairs=pairs), errors.PairIndexError, *fragments)
    check(lambda: neuroneval.score(A, C, pairs=pairs), errors.PairIndexError, *fragments)


def test_pairs_wrong_shape() -> None:
    check(lambda: neuroneval.compute(A, C, pairs=[[0, 0, 0]]), errors.ShapeError, "pairs", "(1, 3)")
    check(lambda: neuroneval.compute(A, C, pairs=[0, 1]), errors.ShapeError, "pairs", "(2,)")
    check(lambda: neuroneval.compute(A, C, pairs=np.zeros((2, 2, 2), dtype=int)), errors.ShapeError, "pairs")


def test_pairs_wrong_dtype() -> None:
    check(lambda: neuroneval.compute(A, C, pairs=[[0.5, 0]]), errors.DTypeError, "pairs")
    check(lambda: neuroneval.compute(A, C, pairs=[["a", "b"]]), errors.DTypeError, "pairs")


# --- names, labels, dtypes -----------------------------------------------------------------------


def test_unknown_metric_lists_known_names() -> None:
    msg = check(lambda: neuroneval.compute(A, C, ["correlation", "pearson"]), errors.UnknownMetricError, "pearson")
    for name in neuroneval.METRICS:
        assert name in msg, name
    check(lambda: neuroneval.score(A, C, "f2"), errors.UnknownMetricError, "f2", "iou")


@pytest.mark.parametrize("labels", [[0, 2, 1], [0, 0.5, 1], [-1, 0, 1]])
def test_non_binary_labels(labels: list[float]) -> None:
    scores = [0.1, 0.2, 0.3]
    check(lambda: nm.roc_auc_score(labels, scores), errors.LabelError, "position 1" if labels[0] == 0 else "0")
    check(lambda: nm.average_precision_score(labels, scores), errors.LabelError)
    check(
        lambda: nm.roc_auc_score_columns(np.array(labels, dtype=float)[:, None], np.array(scores)[:, None]),
        errors.LabelError,
    )


def test_meta_auprc_bad_truth() -> None:
    s = np.zeros((2, 3))
    check(lambda: neuroneval.meta_auprc(s, np.array([0, 3])), errors.LabelError)
    check(lambda: neuroneval.meta_auprc(s, np.full((2, 3), 2)), errors.LabelError)
    check(lambda: neuroneval.meta_auprc(s, np.array([0, 1, 2])), errors.ShapeError)
    check(lambda: neuroneval.meta_auprc(np.zeros(3), np.array([0, 1, 2])), errors.ShapeError)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([["a", "b", "c"]] * 8),
        np.array([[b"x"] * 3] * 8),
        np.array([[1 + 2j] * 3] * 8),
        np.array([[None] * 3] * 8, dtype=object),
        np.zeros(8 * 3, dtype="datetime64[s]").reshape(8, 3),
    ],
)
def test_unreadable_dtypes(bad: np.ndarray) -> None:
    check(lambda: neuroneval.compute(bad, C), errors.DTypeError, "activations", str(bad.dtype))
    check(lambda: neuroneval.compute(A, bad[:, :2]), errors.DTypeError, "concepts")


def test_integer_bool_and_list_inputs_are_accepted() -> None:
    a_int = (A * 10).astype(np.int32)
    got = neuroneval.compute(a_int, C.astype(bool), ["correlation"])["correlation"]
    expected = neuroneval.compute(a_int.astype(np.float64), C, ["correlation"])["correlation"]
    np.testing.assert_array_equal(got, expected)
    got_list = neuroneval.compute(A.tolist(), C.tolist(), ["auc"], alpha=0.5)["auc"]
    np.testing.assert_array_equal(got_list, neuroneval.compute(A, C, ["auc"], alpha=0.5)["auc"])


# --- no panics ------------------------------------------------------------------------------------


DEGENERATE = [
    ((0, 5), (0, 5)),
    ((5, 0), (5, 5)),
    ((5, 5), (5, 0)),
    ((0, 0), (0, 0)),
    ((1, 1), (1, 1)),
    ((1, 0), (1, 1)),
    ((2, 1), (3, 1)),
]


@pytest.mark.parametrize("a_shape, c_shape", DEGENERATE)
def test_degenerate_shapes_never_panic(a_shape: tuple[int, int], c_shape: tuple[int, int]) -> None:
    acts, conc = np.zeros(a_shape), np.zeros(c_shape)
    calls: list[Callable[[], Any]] = [
        lambda: neuroneval.compute(acts, conc),
        lambda: neuroneval.compute(acts, conc, alpha=1.0, k=1, top_alpha=1.0),
        lambda: neuroneval.compute(acts, conc, alpha=1e-300, top_alpha=5e-324),
        lambda: neuroneval.compute(acts, conc, pairs=[[0, 0]]),
        lambda: neuroneval.compute(acts, conc, pairs=np.zeros((0, 2), dtype=np.int64)),
        lambda: neuroneval.score(acts, conc),
        lambda: nm.roc_auc_score_columns(acts, acts),
        lambda: nm.average_precision_score_columns(conc, conc),
        lambda: neuroneval.meta_auprc(acts, np.zeros(a_shape, dtype=bool)),
    ]
    for call in calls:
        try:
            call()
        except neuroneval.NeuronEvalError as err:
            assert isinstance(err, ValueError)
        except BaseException as err:  # a PanicException derives from BaseException
            pytest.fail(f"{type(err).__module__}.{type(err).__name__}: {err}")


def test_extreme_values_never_panic() -> None:
    cases = [
        (np.array([[1e308], [-1e308], [1e308]]), np.array([[1.0], [0.0], [1.0]])),
        (np.array([[5e-324], [0.0], [0.0]]), np.array([[1.0], [0.0], [5e-324]])),
        (np.full((3, 1), np.finfo(np.float32).max, dtype=np.float32), np.ones((3, 1))),
    ]
    for acts, conc in cases:
        try:
            out = neuroneval.compute(acts, conc, alpha=0.5, k=2, top_alpha=1.0)
        except BaseException as err:
            pytest.fail(f"{type(err).__module__}.{type(err).__name__}: {err}")
        for name, v in out.items():
            assert v.shape == (1, 1), name
            assert not np.isinf(v).any() or name in ("wpmi", "mad"), (name, v)
